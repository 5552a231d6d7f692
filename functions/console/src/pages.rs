// generated from functions.toml by `python3 scripts/check-functions.py --write`: do not edit.

/// The paths the single-page app answers itself: each gets `index.html`.
/// Anything else is the API's or a 404.
pub const CLIENT_ROUTES: &[&str] = &[
    "/",
    "/sign-in",
    "/sign-up",
    "/confirm",
    "/reset-password",
    "/device",
    "/clusters",
    "/clusters/new",
    "/clusters/{id}",
    "/clusters/{id}/nodes/{node}",
    "/billing",
    "/account",
    "/admin",
    "/admin/{*rest}",
    "/labels",
    "/organizations",
    "/invitations",
];
