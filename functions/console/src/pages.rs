// generated from functions.toml by `python3 scripts/check-functions.py --write`: do not edit.

/// The paths the single-page app answers itself: each gets `index.html`.
/// Anything else is the API's or a 404.
pub const CLIENT_ROUTES: &[&str] = &[
    "/",
    "/clusters",
    "/clusters/{*rest}",
    "/account",
    "/billing",
    "/admin",
    "/admin/{*rest}",
    "/sign-in",
    "/sign-up",
    "/confirm",
    "/reset-password",
];
