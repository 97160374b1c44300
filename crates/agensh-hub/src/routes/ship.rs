//! Ship over HTTP ([`ops::ship`]): from "tests pass" to "merged" in one call.

use agensh_protocol::rest::NewShip;
use axum::extract::State;
use axum::Json;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiResult};
use crate::ops::ship::{self, Shipped};
use crate::state::AppState;

pub async fn ship(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<NewShip>,
) -> ApiResult<Json<Shipped>> {
    Ok(Json(ship::ship_change(&s, &caller, req).await?))
}
