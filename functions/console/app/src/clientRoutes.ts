// generated from functions.toml by `python3 scripts/check-functions.py --write`: do not edit.

/// The pages a signed-out reader may see; every other page asks to sign in.
export const PUBLIC_PAGES: readonly string[] = ["/sign-in", "/sign-up", "/confirm", "/reset-password"];

/// The pages the `console` function answers with the app (`/**`: and every path under).
export const PAGES: readonly string[] = ["/", "/clusters", "/clusters/**", "/account", "/billing", "/admin", "/admin/**"];
