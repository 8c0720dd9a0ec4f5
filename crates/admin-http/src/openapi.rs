//! The router and its OpenAPI document.

use axum::Router;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use crate::routes::health;
use crate::state::AppState;

/// Path of the served OpenAPI document.
pub const OPENAPI_PATH: &str = "/api-docs/openapi.json";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tether admin API",
        description = "Who holds which native session, since when, at which generation — and the actions operators take on it."
    ),
    tags((name = "health", description = "Liveness and readiness"))
)]
struct ApiDoc;

fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi()).routes(routes!(health::healthz))
}

/// The OpenAPI document of the admin API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_router().split_for_parts().1
}

/// The admin router: API routes, `/api-docs/openapi.json` and Swagger UI at `/docs`.
pub fn app(state: AppState) -> Router {
    let (router, api) = api_router().split_for_parts();
    router
        .merge(SwaggerUi::new("/docs").url(OPENAPI_PATH, api))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}
