// The keys of every query the console's own pages make, one factory for
// all: a key is written once, so a change's invalidation reaches every
// query that read what it changed (a key is a prefix of the keys under it:
// `keys.nodes(id)` invalidates every `keys.nodeList(id, …)`). A page a
// capability brings keeps the keys of its own resources beside it.
export const keys = {
  me: () => ["me"] as const,
  loginOptions: () => ["login-options"] as const,
  organizations: () => ["organizations"] as const,

  clusters: () => ["clusters"] as const,
  clusterList: (q: string, health: string, sort: string) => ["clusters", "list", q, health, sort] as const,
  cluster: (id: string) => ["cluster", id] as const,
  operations: (clusterId: string) => ["operations", clusterId] as const,
  liveOperations: (clusterId: string, status: string) => ["operations", clusterId, "live", status] as const,
  operationHistory: (clusterId: string) => ["operations", clusterId, "history"] as const,
  jobs: (clusterId: string) => ["jobs", clusterId] as const,
  clusterActivity: (clusterId: string) => ["activity", "cluster", clusterId] as const,
  kubeconfigs: (clusterId: string) => ["kubeconfigs", clusterId] as const,
  metrics: (clusterId: string, hours: number) => ["metrics", clusterId, hours] as const,
  nodes: (clusterId: string) => ["nodes", clusterId] as const,
  nodeList: (clusterId: string, includeDeleted: boolean) => ["nodes", clusterId, "list", includeDeleted] as const,
  timeline: (nodeId: string, hours: number) => ["timeline", nodeId, hours] as const,
  tokens: (clusterId: string) => ["tokens", clusterId] as const,
  joinAttempts: (clusterId: string) => ["join-attempts", clusterId] as const,
  hostnames: (clusterId: string) => ["hostnames", clusterId] as const,
  edge: (clusterId: string) => ["hostnames", clusterId, "edge"] as const,

  apiKeys: () => ["api-keys"] as const,
  notifications: () => ["notifications"] as const,
  sessions: () => ["sessions"] as const,
  logins: () => ["logins"] as const,
  activity: () => ["activity"] as const,

  kubernetesVersions: () => ["kubernetes-versions"] as const,
  entitlements: () => ["entitlements"] as const,
  plans: () => ["plans"] as const,
  orders: () => ["orders"] as const,

  admin: {
    users: (filter?: object) => (filter === undefined ? ["admin", "users"] : ["admin", "users", filter]) as readonly unknown[],
    clusters: (filter: object) => ["admin", "clusters", filter] as const,
    jobs: (status?: string, clusterId?: string) =>
      (status === undefined ? ["admin", "jobs"] : ["admin", "jobs", status, clusterId ?? ""]) as readonly string[],
    audit: (actor: string) => ["admin", "audit", actor] as const,
    settings: () => ["admin", "settings"] as const,
    billingSettings: () => ["admin", "billing-settings"] as const,
    plans: () => ["admin", "plans"] as const,
    orders: (status?: string) => (status === undefined ? ["admin", "orders"] : ["admin", "orders", status]) as readonly string[],
  },
};
