//! How errors leave the hub: HTTP status plus `{"error":{"code":…,"message":…}}`, and the
//! extractors that turn malformed requests into that same shape.

use agensh_domain::{Error, ErrorKind};
use agensh_protocol::rest::{ErrorBody, ErrorInfo};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

/// A domain error on its way out as an HTTP response.
#[derive(Debug)]
pub struct ApiError(pub Error);

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError(e)
    }
}

/// The HTTP status for an error kind.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = status_of(self.0.kind);
        if status.is_server_error() {
            tracing::error!(code = %self.0.code, "{}", self.0.message);
        }
        let retry_after = self.0.retry_after_secs;
        let body = ErrorBody {
            error: ErrorInfo {
                code: self.0.code,
                message: self.0.message,
            },
        };
        let mut r = (status, axum::Json(body)).into_response();
        if let Some(secs) = retry_after {
            r.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        r
    }
}

/// Result type of handlers.
pub type ApiResult<T> = Result<T, ApiError>;

/// `axum::Json` whose rejections come out in the hub's error shape.
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(ApiError(json_rejection(rejection))),
        }
    }
}

fn json_rejection(r: JsonRejection) -> Error {
    match r {
        JsonRejection::MissingJsonContentType(_) => Error::invalid(
            "bad_content_type",
            "the body must be JSON — send the header Content-Type: application/json",
        ),
        r if r.status() == StatusCode::PAYLOAD_TOO_LARGE => Error::new(
            ErrorKind::TooLarge,
            "body_too_large",
            "the request body is larger than the hub accepts (hub.body_limit in agensh.toml) — send less, or put long content in a file in the repository",
        ),
        r => Error::invalid(
            "bad_body",
            format!("the request body was not understood: {} — see docs/API.md for the fields", r.body_text()),
        ),
    }
}

/// `axum::extract::Query` whose rejections come out in the hub's error shape.
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(r) => Err(ApiError(query_rejection(r))),
        }
    }
}

fn query_rejection(r: QueryRejection) -> Error {
    Error::invalid(
        "bad_query_string",
        format!(
            "the query string was not understood: {} — see docs/API.md for the parameters",
            r.body_text()
        ),
    )
}

/// Answer for paths the hub does not serve.
pub async fn not_found(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError(Error::not_found(
        "no_such_endpoint",
        format!(
            "the hub has no endpoint {method} {} — see docs/API.md",
            uri.path()
        ),
    ))
}

/// Answer for a known path with the wrong method.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let e = Error::invalid(
        "method_not_allowed",
        format!("{} does not take {method} — see docs/API.md", uri.path()),
    );
    let mut r = ApiError(e).into_response();
    *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    r
}
