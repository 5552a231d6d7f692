//! Runtime adapters: the same router or task runs under AWS Lambda, as a
//! long-running process, or inside `local`. The choice is made once, at start,
//! from `AWS_LAMBDA_RUNTIME_API`.

mod http;
mod schedule;

pub use http::{serve_http, serve_http_on};
pub use schedule::{ScheduleMode, report_failed_run, run_schedule};

/// True when the process was started by the Lambda runtime.
pub fn under_lambda() -> bool {
    std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some()
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown requested");
}
