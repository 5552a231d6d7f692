// What the table of pages (pageTable.ts, generated from functions.toml)
// holds, and what every page is given.
import type { ComponentType } from "react";
import type { Key } from "./i18n";
import type { User } from "./session";

/// A page's props: the path shown, its named segments, the reader.
export interface PageProps {
  path: string;
  params: Record<string, string>;
  user: User;
}

export interface PageRoute {
  /// `/clusters/:id`: `:name` is one segment; a trailing `/**` is the path
  /// and every path under it.
  path: string;
  component: ComponentType<PageProps>;
  /// The i18n key of its link in the header, for the pages that have one.
  nav?: Key;
  /// Where that link goes, when not to `path`.
  href?: string;
  /// The role the page needs.
  role?: User["role"];
}

/// A page a signed-out reader may see: it is given nothing.
export interface PublicPageRoute {
  path: string;
  component: ComponentType;
}
