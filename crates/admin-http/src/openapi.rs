//! The router and its OpenAPI document.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use crate::error::{ApiError, ErrorBody};
use crate::params::{MAX_BODY_BYTES, MAX_HEADER_BYTES, MAX_HEADER_COUNT, MAX_URI_BYTES};
use crate::routes::{audit, bindings, dashboard, health, ops, quarantine, sessions, ui};
use crate::state::AppState;

/// Path of the served OpenAPI document.
pub const OPENAPI_PATH: &str = "/api-docs/openapi.json";

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "TETHER_READ_TOKEN / TETHER_READ_TOKENS (read scope) or TETHER_ADMIN_TOKEN / TETHER_ADMIN_TOKENS (admin scope)",
                    ))
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tether admin API",
        description = "Who holds which native session, since when, at which generation — and the actions operators take on it."
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    components(schemas(ErrorBody)),
    tags(
        (name = "health", description = "Liveness, readiness and metrics"),
        (name = "sessions", description = "Host sessions"),
        (name = "bindings", description = "Binding rows, leases and the lease history"),
        (name = "transcripts", description = "Transcript search (sanitized snippets)"),
        (name = "quarantine", description = "Quarantined binding keys"),
        (name = "actions", description = "Operator actions (admin scope)"),
    )
)]
struct ApiDoc;

fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics))
        .routes(routes!(sessions::list_sessions))
        .routes(routes!(sessions::get_session))
        .routes(routes!(sessions::delete_session_route))
        .routes(routes!(sessions::search_session))
        .routes(routes!(sessions::search_all))
        .routes(routes!(bindings::list_namespaces))
        .routes(routes!(bindings::list_leases))
        .routes(routes!(bindings::get_binding))
        .routes(routes!(bindings::expire_lease))
        .routes(routes!(bindings::list_lease_events))
        .routes(routes!(quarantine::list_quarantine))
        .routes(routes!(quarantine::get_quarantine))
        .routes(routes!(quarantine::release_quarantine))
        .routes(routes!(audit::list_audit))
}

/// The OpenAPI document of the admin API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_router().split_for_parts().1
}

/// Refuses a request whose head is above the service's limits with a typed error, before any
/// route, authentication or body read: a request target above [`MAX_URI_BYTES`] is 414
/// `uri_too_long`; more than [`MAX_HEADER_COUNT`] header fields, or more than
/// [`MAX_HEADER_BYTES`] of them, is 431 `headers_too_large`. (The HTTP parser's own limits,
/// set above these by [`serve`](crate::serve), answer only a request far beyond them, with an
/// empty body.)
async fn request_head_limits(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let uri = request.uri();
    let target = uri.path_and_query().map_or(0, |pq| pq.as_str().len())
        + uri.authority().map_or(0, |a| a.as_str().len());
    if target > MAX_URI_BYTES {
        return ApiError::UriTooLong(format!(
            "the request target is {target} bytes, above the limit of {MAX_URI_BYTES}; \
             narrow the query (filters and `cursor` are short)"
        ))
        .into_response();
    }
    let headers = request.headers();
    let count = headers.len();
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if count > MAX_HEADER_COUNT || bytes > MAX_HEADER_BYTES {
        return ApiError::HeadersTooLarge(format!(
            "the request has {count} header fields of {bytes} bytes; at most \
             {MAX_HEADER_COUNT} fields and {MAX_HEADER_BYTES} bytes are accepted"
        ))
        .into_response();
    }
    next.run(request).await
}

/// Turns the body-limit layer's plain 413 into the typed `payload_too_large` error.
async fn typed_too_large(response: Response) -> Response {
    let json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE && !json {
        return ApiError::PayloadTooLarge(format!(
            "the request body is above {MAX_BODY_BYTES} bytes; send a smaller body"
        ))
        .into_response();
    }
    response
}

/// The policy of Swagger UI's pages (Swagger UI sets inline styles at run time).
const DOCS_CSP: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
     object-src 'none'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// Security headers on every response: `X-Content-Type-Options: nosniff`, no framing
/// (`X-Frame-Options: DENY`), no referrer; HTML pages also get a Content-Security-Policy
/// (Tether's own pages allow only the dashboard's hashed inline style and script).
async fn security_headers(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use axum::http::{HeaderValue, header};
    // Every page Tether renders itself (dashboard, sign-in, session pages, confirmations) uses
    // only the dashboard's hashed inline style and script; Swagger UI gets its own policy.
    let dashboard = !request.uri().path().starts_with("/docs");
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    let html = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if html {
        let policy = if dashboard {
            HeaderValue::from_static(dashboard::content_security_policy())
        } else {
            HeaderValue::from_static(DOCS_CSP)
        };
        headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    response
}

/// Any path the service does not serve: a typed 404 (the body says where to look).
async fn unknown_path(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!(
        "no route for `{}`: the API is under /v1 (see {OPENAPI_PATH} or /docs)",
        uri.path()
    ))
}

/// A served path asked with a method it does not take: a typed 405 (axum adds `Allow`).
async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!(
        "`{}` does not take {method}: see the `Allow` header or {OPENAPI_PATH}",
        uri.path()
    ))
}

/// Counts every request and its latency by method and route template.
async fn http_metrics(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let started = std::time::Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    state.http_metrics().record(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// The admin router: API routes, the dashboard at `/`, `/api-docs/openapi.json` and Swagger UI
/// at `/docs`. Request bodies are limited to [`MAX_BODY_BYTES`], request targets to
/// [`MAX_URI_BYTES`] and header fields to [`MAX_HEADER_COUNT`] and [`MAX_HEADER_BYTES`], each
/// refused with a typed error.
pub fn app(state: AppState) -> Router {
    let (router, api) = api_router().split_for_parts();
    router
        .route("/", axum::routing::get(dashboard::dashboard))
        .route(
            "/signin",
            axum::routing::get(crate::signin::signin_page).post(crate::signin::signin),
        )
        .route("/signout", axum::routing::post(crate::signin::signout))
        .route("/ui/actions", axum::routing::post(crate::signin::ui_action))
        .route(
            "/ui/sessions/{key}",
            axum::routing::get(dashboard::session_page),
        )
        .route("/ui/sessions", axum::routing::get(ui::sessions))
        .route("/ui/leases", axum::routing::get(ui::leases))
        .route("/ui/lease-events", axum::routing::get(ui::lease_events))
        .route("/ui/quarantine", axum::routing::get(ui::quarantine))
        .route("/ui/audit", axum::routing::get(ui::audit))
        .route("/ui/search", axum::routing::get(ui::transcript_search))
        .merge(SwaggerUi::new("/docs").url(OPENAPI_PATH, api))
        .fallback(unknown_path)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        .layer(axum::middleware::map_response(typed_too_large))
        .layer(axum::middleware::from_fn(request_head_limits))
        .layer(axum::middleware::from_fn(security_headers))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            http_metrics,
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}
