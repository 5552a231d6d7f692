// Light or dark: the system's setting unless the reader chose one in the
// header, kept in this browser.
export const THEMES = ["system", "light", "dark"] as const;
export type Theme = (typeof THEMES)[number];

const KEY = "kubebyon.theme";

export function storedTheme(): Theme {
  const value = localStorage.getItem(KEY);
  return THEMES.find((t) => t === value) ?? "system";
}

/// Shows `theme` (the stylesheet reads `data-theme`) and remembers it.
export function applyTheme(theme: Theme) {
  if (theme === "system") {
    delete document.documentElement.dataset.theme;
    localStorage.removeItem(KEY);
  } else {
    document.documentElement.dataset.theme = theme;
    localStorage.setItem(KEY, theme);
  }
}
