// generated from functions.toml by `python3 scripts/check-functions.py --write`: do not edit.

import { lazy } from "react";
import type { PageRoute, PublicPageRoute } from "./page";
import { Account } from "./pages/account";
import { ConfirmEmail, ResetPassword, SignIn, SignUp } from "./pages/auth";
import { Billing } from "./pages/billing";
import { ClusterDetail } from "./pages/cluster";
import { ClusterList, CreateCluster } from "./pages/clusters";
import { Device } from "./pages/device";
import { Invitations } from "./pages/invitations";
import { Labels } from "./pages/labels";
import { NodeDetail } from "./pages/nodes";
import { Organizations } from "./pages/organizations";

/// The pages a signed-out reader may see; every other page asks to sign in.
export const PUBLIC_PAGES: readonly PublicPageRoute[] = [
  { path: "/sign-in", component: SignIn },
  { path: "/sign-up", component: SignUp },
  { path: "/confirm", component: ConfirmEmail },
  { path: "/reset-password", component: ResetPassword },
];

/// The pages of a signed-in reader: the first whose path matches is shown;
/// `nav` is its link's label in the header.
export const PAGES: readonly PageRoute[] = [
  { path: "/device", component: Device },
  { path: "/clusters", component: ClusterList, nav: "nav.clusters" },
  { path: "/clusters/new", component: CreateCluster },
  { path: "/clusters/:id", component: ClusterDetail },
  { path: "/clusters/:id/nodes/:node", component: NodeDetail },
  { path: "/billing", component: Billing, nav: "nav.billing" },
  { path: "/account", component: Account, nav: "nav.account" },
  { path: "/admin/**", component: lazy(() => import("./pages/admin").then((m) => ({ default: m.Admin }))), nav: "nav.admin", href: "/admin/users", role: "admin" },
  { path: "/labels", component: Labels, nav: "labels.nav" },
  { path: "/organizations", component: Organizations, nav: "organizations.nav" },
  { path: "/invitations", component: Invitations },
];
