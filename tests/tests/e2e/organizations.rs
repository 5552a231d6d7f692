//! Organisations (docs/organizations.md): every user has a personal one,
//! existing data migrates into them, clusters are listed and created in the
//! organisation a request names, and every cluster route answers each role
//! as the matrix says — 403 for a role that may not, 404 for a non-member,
//! so nobody learns which clusters exist.

use axum::http::StatusCode;
use serde_json::{Value, json};
use shared::organizations::Role;
use uuid::Uuid;

use crate::harness::{Client, TestApp};

/// A new user with a verified address (the database makes their personal
/// organisation).
async fn user(app: &TestApp, email: &str) -> Uuid {
    user_at(app, email, true).await
}

/// A user whose address is verified or not.
async fn user_at(app: &TestApp, email: &str, verified: bool) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO users (email, display_name, role, email_verified_at)
         VALUES ($1, 'Invitee', 'user', CASE WHEN $2 THEN now() END) RETURNING id",
    )
    .bind(email)
    .bind(verified)
    .fetch_one(&app.db.pool)
    .await
    .unwrap()
}

/// A shared organisation with these members.
async fn organization(app: &TestApp, members: &[(Uuid, Role)]) -> Uuid {
    let id: Uuid =
        sqlx::query_scalar("INSERT INTO organizations (name) VALUES ('Acme') RETURNING id")
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    for (user, role) in members {
        sqlx::query(
            "INSERT INTO organization_members (organization_id, user_id, role) VALUES ($1, $2, $3)",
        )
        .bind(id)
        .bind(user)
        .bind(role.as_str())
        .execute(&app.db.pool)
        .await
        .unwrap();
    }
    id
}

fn in_organization(client: Client, organization: Uuid) -> Client {
    client.header("kubebyon-organization", organization.to_string())
}

fn cluster_body(name: &str) -> Value {
    json!({ "name": name, "workload_cpu_limit_milli_cores": 1000, "workload_memory_limit_mib": 1024 })
}

/// The lowest role each cluster route is for, as docs/organizations.md
/// gives it: reads for every member, deleting the cluster for admins,
/// every other change for members. None: the route has no rule.
fn lowest_role(method: &str, route: &str) -> Option<Role> {
    if method == "GET" {
        return Some(Role::Viewer);
    }
    let rest = route.strip_prefix("/api/console/clusters/{cluster_id}")?;
    match (method, rest) {
        ("DELETE", "") => Some(Role::Admin),
        ("PATCH", "")
        | ("POST", "/hostnames")
        | ("DELETE", "/hostnames/{binding_id}")
        | ("POST", "/hostnames/{binding_id}/verify")
        | ("POST", "/kubeconfigs")
        | ("POST", "/exec-credentials")
        | ("DELETE", "/kubeconfigs/{credential_id}")
        | ("PUT", "/labels")
        | ("POST", "/databases")
        | ("PATCH", "/databases/{database_id}")
        | ("DELETE", "/databases/{database_id}")
        | ("POST", "/databases/{database_id}/retry")
        | ("POST", "/databases/{database_id}/rotate")
        | ("DELETE", "/nodes/{node_id}")
        | ("POST", "/operations/{operation_id}/retry")
        | ("POST", "/tokens")
        | ("DELETE", "/tokens/{token_id}") => Some(Role::Member),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cluster_route_answers_each_role_as_the_matrix_says() {
    let app = TestApp::builder("organizations").host().build().await;
    let ranked = [Role::Viewer, Role::Member, Role::Admin, Role::Owner];
    let mut members = Vec::new();
    for role in ranked {
        members.push((
            user(&app, &format!("{}@acme.example", role.as_str())).await,
            role,
        ));
    }
    members.push((app.development_user(), Role::Owner));
    let acme = organization(&app, &members).await;
    let stranger = user(&app, "stranger@elsewhere.example").await;
    let (status, created) = in_organization(app.client(), acme)
        .call(
            "POST",
            "/api/console/clusters",
            Some(cluster_body("shared")),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{created}");
    let cluster = created["cluster"]["id"].as_str().unwrap().to_string();
    assert_eq!(created["cluster"]["organization_id"], acme.to_string());
    app.drive().await;

    // Every cluster route of the document, deleting the cluster last.
    let document = serde_json::to_value(local::openapi()).unwrap();
    let mut routes: Vec<(String, String)> = document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(route, _)| route.starts_with("/api/console/clusters/{cluster_id}"))
        .flat_map(|(route, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|m| ["get", "post", "put", "patch", "delete"].contains(&m.as_str()))
                .map(|m| (m.to_uppercase(), route.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    routes.sort_by_key(|(method, route)| {
        (
            method == "DELETE" && route.ends_with("{cluster_id}"),
            route.clone(),
        )
    });
    assert!(routes.len() >= 20, "{routes:?}");
    let unruled: Vec<_> = routes
        .iter()
        .filter(|(method, route)| lowest_role(method, route).is_none())
        .collect();
    assert!(
        unruled.is_empty(),
        "cluster routes with no rule in the matrix: {unruled:?}"
    );

    let not_found = |body: &Value| body["detail"] == "cluster not found";
    for (method, route) in &routes {
        let lowest = lowest_role(method, route).unwrap();
        let path = route
            .split('/')
            .map(|part| match part {
                "{cluster_id}" => cluster.clone(),
                p if p.starts_with('{') => Uuid::new_v4().to_string(),
                p => p.to_string(),
            })
            .collect::<Vec<_>>()
            .join("/");
        let body = (method != "GET" && method != "DELETE").then(|| json!({}));
        let (status, answer) = app.call_as(stranger, method, &path, body.clone()).await;
        assert!(
            status == StatusCode::NOT_FOUND && not_found(&answer),
            "a non-member's {method} {route}: {status} {answer}"
        );
        for (user, role) in &members[..4] {
            let (status, answer) = app.call_as(*user, method, &path, body.clone()).await;
            let refused = status == StatusCode::FORBIDDEN && answer["code"] == "forbidden";
            if ranked.iter().position(|r| r == role) < ranked.iter().position(|r| *r == lowest) {
                assert!(refused, "{role:?} {method} {route}: {status} {answer}");
                assert!(
                    answer["detail"].as_str().unwrap().contains(role.as_str()),
                    "the refusal names the role: {answer}"
                );
            } else {
                let hidden = status == StatusCode::NOT_FOUND && not_found(&answer);
                assert!(
                    !refused && !hidden,
                    "{role:?} {method} {route}: {status} {answer}"
                );
            }
        }
    }
    // The document says so for every route a role can be refused.
    for (method, route) in &routes {
        let documented = document["paths"][route][method.to_lowercase()]["responses"]
            .get("403")
            .is_some();
        assert_eq!(
            documented,
            lowest_role(method, route) != Some(Role::Viewer),
            "{method} {route}"
        );
    }
}

#[tokio::test]
async fn clusters_are_listed_and_created_in_the_organization_a_request_names() {
    let app = TestApp::builder("organizations").build().await;
    let me = app.development_user();
    let viewer = user(&app, "viewer@acme.example").await;
    let acme = organization(&app, &[(me, Role::Member), (viewer, Role::Viewer)]).await;
    let stranger = user(&app, "stranger@elsewhere.example").await;

    // Without the header: the caller's personal organisation, as before.
    let (status, mine) = app
        .call("POST", "/api/console/clusters", Some(cluster_body("web")))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{mine}");
    let personal: Uuid =
        sqlx::query_scalar("SELECT id FROM organizations WHERE personal_user_id = $1")
            .bind(me)
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    assert_eq!(mine["cluster"]["organization_id"], personal.to_string());
    // The same name is free in another organisation, not twice in one.
    let acme_client = in_organization(app.client(), acme);
    let (status, shared) = acme_client
        .call("POST", "/api/console/clusters", Some(cluster_body("web")))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{shared}");
    let (status, again) = acme_client
        .call("POST", "/api/console/clusters", Some(cluster_body("web")))
        .await;
    assert_eq!(
        (status, again["code"].as_str()),
        (StatusCode::CONFLICT, Some("cluster_name_taken")),
        "{again}"
    );

    // Each list is its organisation's.
    let names = |page: &Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{}/{}",
                    c["organization_id"].as_str().unwrap(),
                    c["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    let (_, page) = app.call("GET", "/api/console/clusters", None).await;
    assert_eq!(names(&page), [format!("{personal}/web")]);
    let (_, page) = in_organization(app.client_as(viewer), acme)
        .call("GET", "/api/console/clusters", None)
        .await;
    assert_eq!(names(&page), [format!("{acme}/web")]);
    let (status, found) = in_organization(app.client_as(viewer), acme)
        .call("GET", "/api/console/cluster-labels", None)
        .await;
    assert_eq!(
        (status, found["items"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(1)),
        "{found}"
    );

    // A viewer may not create; a non-member's and a bad header are refused
    // before anything is written.
    let (status, refused) = in_organization(app.client_as(viewer), acme)
        .call(
            "POST",
            "/api/console/clusters",
            Some(cluster_body("viewer-made")),
        )
        .await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden")),
        "{refused}"
    );
    for (client, expected) in [
        (
            in_organization(app.client_as(stranger), acme),
            StatusCode::NOT_FOUND,
        ),
        (
            in_organization(app.client(), Uuid::new_v4()),
            StatusCode::NOT_FOUND,
        ),
        (
            app.client().header("kubebyon-organization", "acme"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        // A look-alike digit (U+0662) is not an id.
        (
            app.client().header(
                "kubebyon-organization",
                format!("\u{0662}{}", &acme.to_string()[1..]),
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        for (method, body) in [("GET", None), ("POST", Some(cluster_body("intruder")))] {
            let (status, answer) = client.call(method, "/api/console/clusters", body).await;
            assert_eq!(status, expected, "{method}: {answer}");
        }
    }
    assert_eq!(app.count("clusters").await, 2);
}

/// The migration on a database that has data: every user gets a personal
/// organisation they own, and every cluster moves into its owner's.
#[tokio::test]
async fn existing_users_and_clusters_migrate_into_personal_organizations() {
    let db = tests::database::TestDb::empty().await;
    let mut files: Vec<_> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
    files.sort();
    let at = files
        .iter()
        .position(|f| f.to_string_lossy().ends_with("_organizations.sql"))
        .expect("the organizations migration");
    for file in &files[..at] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(std::fs::read_to_string(file).unwrap()))
            .execute(&db.pool)
            .await
            .unwrap_or_else(|err| panic!("{}: {err}", file.display()));
    }
    // 300 users, 900 clusters (a deleted one among each user's three), a
    // paid order each and a pending one for every third user.
    sqlx::raw_sql(
        "INSERT INTO users (email, display_name)
             SELECT 'user' || n || '@example.com', 'User ' || n FROM generate_series(1, 300) n;
         INSERT INTO clusters (owner_user_id, name, vcluster_name, namespace, kubernetes_version,
                               workload_cpu_limit_milli_cores, workload_memory_limit_mib,
                               control_plane_cpu_request_milli_cores, control_plane_memory_request_mib,
                               public_access_mode, status, deleted_at)
             SELECT u.id, 'c' || k, 'c' || k, 'kb-' || replace(u.id::text, '-', '') || k, '1.33',
                    1000, 1024, 500, 1024, 'nodeport',
                    CASE WHEN k = 3 THEN 'deleted' ELSE 'ready' END,
                    CASE WHEN k = 3 THEN now() END
             FROM users u, generate_series(1, 3) k;
         INSERT INTO plans (name, max_clusters, max_nodes, max_cpu_milli_cores, max_memory_mib,
                            max_hostnames, price_minor_units, currency)
             VALUES ('Pro', 7, 10, 64000, 65536, 5, 1900, 'usd');
         INSERT INTO orders (user_id, plan_id, status, amount, currency, paid_at)
             SELECT u.id, p.id, 'paid', 1900, 'usd', now() FROM users u, plans p;
         INSERT INTO orders (user_id, plan_id, status, amount, currency)
             SELECT u.id, p.id, 'pending', 1900, 'usd' FROM users u, plans p
             WHERE substring(u.email from '[0-9]+')::int % 3 = 0;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // This migration and every one after it, as a deploy runs them.
    for file in &files[at..] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(std::fs::read_to_string(file).unwrap()))
            .execute(&db.pool)
            .await
            .unwrap_or_else(|err| panic!("{}: {err}", file.display()));
    }

    let (users, personal, owners, clusters, misplaced): (i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM users),
                (SELECT count(*) FROM organizations WHERE personal_user_id IS NOT NULL),
                (SELECT count(*) FROM organization_members m JOIN organizations o ON o.id = m.organization_id
                  WHERE m.user_id = o.personal_user_id AND m.role = 'owner'),
                (SELECT count(*) FROM clusters),
                (SELECT count(*) FROM clusters c JOIN organizations o ON o.id = c.organization_id
                  WHERE o.personal_user_id IS DISTINCT FROM c.owner_user_id)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (users, personal, owners, clusters, misplaced),
        (300, 300, 300, 900, 0)
    );
    // Orders move with their users' clusters: each user's plan reads as
    // before, in their personal organisation.
    let (orders, pending, misplaced): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM orders),
                (SELECT count(*) FROM orders WHERE status = 'pending'),
                (SELECT count(*) FROM orders x JOIN organizations o ON o.id = x.organization_id
                  WHERE o.personal_user_id IS DISTINCT FROM x.user_id)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((orders, pending, misplaced), (400, 100, 0));
    let first: Uuid = sqlx::query_scalar(
        "SELECT o.id FROM organizations o JOIN users u ON u.id = o.personal_user_id
         WHERE u.email = 'user1@example.com'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let entitlement = shared::billing::entitlements::read(&mut conn, first)
        .await
        .unwrap();
    assert_eq!(
        (
            entitlement.plan.map(|p| p.name),
            entitlement.limits.map(|l| l.clusters),
            entitlement.usage.clusters
        ),
        (Some("Pro".to_string()), Some(7), 2)
    );
    drop(conn);

    // Code that predates organisations still works: a user it inserts gets
    // a personal organisation, a cluster it inserts lands in it.
    let user: Uuid = sqlx::query_scalar(
        "INSERT INTO users (email, display_name) VALUES ('late@example.com', 'Late') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let organization: Uuid = sqlx::query_scalar(
        "INSERT INTO clusters (owner_user_id, name, vcluster_name, namespace, kubernetes_version,
                               workload_cpu_limit_milli_cores, workload_memory_limit_mib,
                               control_plane_cpu_request_milli_cores, control_plane_memory_request_mib,
                               public_access_mode)
             VALUES ($1, 'late', 'late', 'kb-late', '1.33', 1000, 1024, 500, 1024, 'nodeport')
         RETURNING organization_id",
    )
    .bind(user)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let personal: Option<Uuid> =
        sqlx::query_scalar("SELECT id FROM organizations WHERE personal_user_id = $1")
            .bind(user)
            .fetch_optional(&db.pool)
            .await
            .unwrap();
    assert_eq!(personal, Some(organization));
    let placed: Uuid = sqlx::query_scalar(
        "INSERT INTO orders (user_id, plan_id, amount, currency)
             SELECT $1, id, 1900, 'usd' FROM plans RETURNING organization_id",
    )
    .bind(user)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(Some(placed), personal);
}

async fn role_in(app: &TestApp, organization: Uuid, user: Uuid) -> Option<String> {
    sqlx::query_scalar(
        "SELECT role FROM organization_members WHERE organization_id = $1 AND user_id = $2",
    )
    .bind(organization)
    .bind(user)
    .fetch_optional(&app.db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_change_as_their_roles_allow_and_one_who_goes_loses_their_kubeconfigs() {
    let app = TestApp::builder("organizations").host().build().await;
    let me = app.development_user();
    // A shared organization, its name trimmed; bad names refused.
    for name in ["", "   ", "\u{7}bell", &"n".repeat(101)] {
        let (status, body) = app
            .call(
                "POST",
                "/api/console/organizations",
                Some(json!({ "name": name })),
            )
            .await;
        assert_eq!(
            (status, body["errors"][0]["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("name")),
            "{name:?}: {body}"
        );
    }
    let (status, acme) = app
        .call(
            "POST",
            "/api/console/organizations",
            Some(json!({ "name": "  Acme  " })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{acme}");
    assert_eq!(
        (
            acme["name"].as_str(),
            acme["role"].as_str(),
            acme["personal"].as_bool()
        ),
        (Some("Acme"), Some("owner"), Some(false))
    );
    let acme: Uuid = acme["id"].as_str().unwrap().parse().unwrap();
    let (_, mine) = app.call("GET", "/api/console/organizations", None).await;
    let listed: Vec<(bool, &str)> = mine
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["personal"].as_bool().unwrap(),
                o["role"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [(true, "owner"), (false, "owner")],
        "personal first: {mine}"
    );

    let admin = user(&app, "admin@acme.example").await;
    let member = user(&app, "member@acme.example").await;
    let viewer = user(&app, "viewer@acme.example").await;
    let outsider = user(&app, "outsider@elsewhere.example").await;
    for (user, role) in [(admin, "admin"), (member, "member"), (viewer, "viewer")] {
        sqlx::query(
            "INSERT INTO organization_members (organization_id, user_id, role) VALUES ($1, $2, $3)",
        )
        .bind(acme)
        .bind(user)
        .bind(role)
        .execute(&app.db.pool)
        .await
        .unwrap();
    }
    let members = format!("/api/console/organizations/{acme}/members");
    let (status, list) = app.call_as(viewer, "GET", &members, None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let roles: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["owner", "admin", "member", "viewer"]);
    assert_eq!(
        app.call_as(outsider, "GET", &members, None).await.0,
        StatusCode::NOT_FOUND
    );

    // Who may change whom.
    let role = |user: Uuid, to: &str| (format!("{members}/{user}"), json!({ "role": to }));
    let cases = [
        (member, role(viewer, "member"), StatusCode::FORBIDDEN),
        (viewer, role(viewer, "admin"), StatusCode::FORBIDDEN),
        (admin, role(viewer, "owner"), StatusCode::FORBIDDEN),
        (admin, role(admin, "owner"), StatusCode::FORBIDDEN),
        (admin, role(me, "viewer"), StatusCode::FORBIDDEN),
        (outsider, role(viewer, "member"), StatusCode::NOT_FOUND),
        (admin, role(outsider, "member"), StatusCode::NOT_FOUND),
        (admin, role(viewer, "member"), StatusCode::NO_CONTENT),
        (me, role(admin, "owner"), StatusCode::NO_CONTENT),
        (admin, role(me, "admin"), StatusCode::NO_CONTENT),
        // The last owner stays one, and cannot leave.
        (admin, role(admin, "member"), StatusCode::CONFLICT),
    ];
    for (who, (path, body), expected) in cases {
        let (status, answer) = app.call_as(who, "PATCH", &path, Some(body.clone())).await;
        assert_eq!(status, expected, "{path} {body}: {answer}");
    }
    let (status, answer) = app
        .call_as(admin, "DELETE", &format!("{members}/{admin}"), None)
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (StatusCode::CONFLICT, Some("last_owner")),
        "{answer}"
    );
    assert_eq!(role_in(&app, acme, viewer).await.as_deref(), Some("member"));
    assert_eq!(role_in(&app, acme, me).await.as_deref(), Some("admin"));
    // A personal organization keeps its one member.
    let personal: Uuid =
        sqlx::query_scalar("SELECT id FROM organizations WHERE personal_user_id = $1")
            .bind(member)
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    let (status, answer) = app
        .call_as(
            member,
            "DELETE",
            &format!("/api/console/organizations/{personal}/members/{member}"),
            None,
        )
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (StatusCode::CONFLICT, Some("personal_organization")),
        "{answer}"
    );

    // A member's kubeconfig for the organization's cluster ends when they go.
    let as_member = in_organization(app.client_as(member), acme);
    let (status, created) = as_member
        .call("POST", "/api/console/clusters", Some(cluster_body("team")))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{created}");
    let cluster = created["cluster"]["id"].as_str().unwrap().to_string();
    app.drive().await;
    let (status, kubeconfig) = as_member
        .call(
            "POST",
            &format!("/api/console/clusters/{cluster}/kubeconfigs"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{kubeconfig}");
    // The kubeconfig in JSON, which a YAML reader takes as it is.
    let kube = crate::kubeconfigs::client_of(&kubeconfig.to_string()).await;
    assert_eq!(crate::kubeconfigs::answers(&kube).await, 200);
    let (status, answer) = app
        .call_as(admin, "DELETE", &format!("{members}/{member}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    assert_eq!(
        crate::kubeconfigs::answers(&kube).await,
        401,
        "the kubeconfig is refused at once"
    );
    let reason: Option<String> =
        sqlx::query_scalar("SELECT revoke_reason FROM kubeconfig_credentials WHERE user_id = $1")
            .bind(member)
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    assert_eq!(reason.as_deref(), Some("removed_from_organization"));
    let (status, _) = app
        .call_as(
            member,
            "GET",
            &format!("/api/console/clusters/{cluster}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the cluster is out of reach");
    // The viewer (now a member) leaves of their own accord.
    let (status, _) = app
        .call_as(viewer, "DELETE", &format!("{members}/{viewer}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_events WHERE target_kind = 'organization' AND target_id = $1 ORDER BY id",
    )
    .bind(acme.to_string())
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(
        actions,
        [
            "organization.created",
            "organization.member_role_changed",
            "organization.member_role_changed",
            "organization.member_role_changed",
            "organization.member_removed",
            "organization.member_left",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_owners_removing_each_other_at_once_leave_one_owner() {
    let app = TestApp::builder("organizations").build().await;
    for round in 0..10 {
        let first = user(&app, &format!("first{round}@acme.example")).await;
        let second = user(&app, &format!("second{round}@acme.example")).await;
        let acme = organization(&app, &[(first, Role::Owner), (second, Role::Owner)]).await;
        let remove = |who: Uuid, whom: Uuid| {
            let client = app.client_as(who);
            async move {
                client
                    .call(
                        "DELETE",
                        &format!("/api/console/organizations/{acme}/members/{whom}"),
                        None,
                    )
                    .await
            }
        };
        let (a, b) = tokio::join!(remove(first, second), remove(second, first));
        let done = [&a, &b]
            .iter()
            .filter(|(s, _)| *s == StatusCode::NO_CONTENT)
            .count();
        assert_eq!(done, 1, "{a:?} {b:?}");
        let owners: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM organization_members WHERE organization_id = $1 AND role = 'owner'",
        )
        .bind(acme)
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
        assert_eq!(owners, 1, "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_invitation_is_mailed_and_taken_up_once_by_its_addressee_only() {
    let app = TestApp::builder("organizations").smtp().build().await;
    let (_, acme) = app
        .call(
            "POST",
            "/api/console/organizations",
            Some(json!({ "name": "Acme" })),
        )
        .await;
    let acme: Uuid = acme["id"].as_str().unwrap().parse().unwrap();
    let invitations = format!("/api/console/organizations/{acme}/invitations");
    let invite = |email: &str, role: &str| {
        app.call(
            "POST",
            &invitations,
            Some(json!({ "email": email, "role": role })),
        )
    };
    let token_of = |made: &Value| {
        made["invitation_url"]
            .as_str()
            .unwrap()
            .split_once("#token=")
            .expect("the token in the link's fragment, never sent to a server")
            .1
            .to_string()
    };

    let (status, made) = invite("Dana@Example.com", "member").await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(made["invitation"]["email"], "dana@example.com");
    assert_eq!(made["invitation"]["status"], "pending");
    let token = token_of(&made);
    // The email carries the link (quoted-printable: lines folded, `=` as `=3D`).
    let url = made["invitation_url"].as_str().unwrap().to_string();
    tests::eventually(10, "the invitation's mail", || {
        let url = url.clone();
        let messages = app.mail().messages();
        async move {
            messages
                .iter()
                .map(|m| {
                    m.replace("=\r\n", "")
                        .replace("=\n", "")
                        .replace("=3D", "=")
                })
                .any(|m| m.contains(&url) && m.contains("To: dana@example.com"))
                .then_some(())
        }
    })
    .await;
    let (status, again) = invite("dana@example.com", "viewer").await;
    assert_eq!(
        (status, again["code"].as_str()),
        (StatusCode::CONFLICT, Some("already_invited")),
        "{again}"
    );
    // A look-alike address (a Cyrillic а) is not an address.
    let (status, _) = invite("d\u{0430}na@example.com", "member").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (_, open) = app.call("GET", &invitations, None).await;
    assert_eq!(open.as_array().map(Vec::len), Some(1), "{open}");

    // Only the invited, verified address takes it up, once.
    let dana = user_at(&app, "dana@example.com", false).await;
    let eve = user_at(&app, "eve@example.com", true).await;
    let accept = |who: Uuid, token: &str| {
        app.call_as(
            who,
            "POST",
            "/api/console/organizations/invitations/accept",
            Some(json!({ "token": token })),
        )
    };
    assert_eq!(
        accept(eve, &token).await.0,
        StatusCode::FORBIDDEN,
        "another account"
    );
    assert_eq!(
        accept(dana, &token).await.0,
        StatusCode::FORBIDDEN,
        "an unverified address"
    );
    assert_eq!(
        accept(dana, "not-a-token-we-sent").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        accept(dana, &"t".repeat(129)).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    sqlx::query("UPDATE users SET email_verified_at = now() WHERE id = $1")
        .bind(dana)
        .execute(&app.db.pool)
        .await
        .unwrap();
    let (status, accepted) = accept(dana, &token).await;
    assert_eq!(
        (status, accepted["status"].as_str()),
        (StatusCode::OK, Some("accepted")),
        "{accepted}"
    );
    assert_eq!(role_in(&app, acme, dana).await.as_deref(), Some("member"));
    let (status, replay) = accept(dana, &token).await;
    assert_eq!(
        (status, replay["code"].as_str()),
        (StatusCode::CONFLICT, Some("invitation_answered")),
        "{replay}"
    );
    let (_, theirs) = app
        .call_as(dana, "GET", "/api/console/organizations", None)
        .await;
    assert!(
        theirs
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["id"] == acme.to_string()),
        "{theirs}"
    );
    // A member may not invite; an admin may not invite an owner.
    let (status, _) = app
        .call_as(
            dana,
            "POST",
            &invitations,
            Some(json!({ "email": "x@example.com", "role": "viewer" })),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    sqlx::query("UPDATE organization_members SET role = 'admin' WHERE user_id = $1")
        .bind(dana)
        .execute(&app.db.pool)
        .await
        .unwrap();
    let (status, _) = app
        .call_as(
            dana,
            "POST",
            &invitations,
            Some(json!({ "email": "x@example.com", "role": "owner" })),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Expired, revoked, declined.
    let erin = user_at(&app, "erin@example.com", true).await;
    let (_, made) = invite("erin@example.com", "viewer").await;
    sqlx::query("UPDATE organization_invitations SET expires_at = now() - interval '1 second' WHERE email = 'erin@example.com'")
        .execute(&app.db.pool)
        .await
        .unwrap();
    let (status, expired) = accept(erin, &token_of(&made)).await;
    assert_eq!(
        (status, expired["code"].as_str()),
        (StatusCode::CONFLICT, Some("invitation_expired")),
        "{expired}"
    );
    let (status, _) = invite("erin@example.com", "viewer").await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "an expired invitation makes way for a new one"
    );
    let finn = user_at(&app, "finn@example.com", true).await;
    let (_, made) = invite("finn@example.com", "viewer").await;
    let id = made["invitation"]["id"].as_str().unwrap();
    assert_eq!(
        app.call("DELETE", &format!("{invitations}/{id}"), None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        accept(finn, &token_of(&made)).await.0,
        StatusCode::CONFLICT,
        "a revoked invitation"
    );
    let gina = user_at(&app, "gina@example.com", true).await;
    let (_, made) = invite("gina@example.com", "admin").await;
    let (status, declined) = app
        .call_as(
            gina,
            "POST",
            "/api/console/organizations/invitations/decline",
            Some(json!({ "token": token_of(&made) })),
        )
        .await;
    assert_eq!(
        (status, declined["status"].as_str()),
        (StatusCode::OK, Some("declined"))
    );
    assert_eq!(role_in(&app, acme, gina).await, None);

    // The same link twice at once: one member, one refusal.
    let hal = user_at(&app, "hal@example.com", true).await;
    let (_, made) = invite("hal@example.com", "viewer").await;
    let token = token_of(&made);
    let (a, b) = tokio::join!(accept(hal, &token), accept(hal, &token));
    let statuses = [a.0, b.0];
    assert!(
        statuses.contains(&StatusCode::OK) && statuses.contains(&StatusCode::CONFLICT),
        "{a:?} {b:?}"
    );
    assert_eq!(role_in(&app, acme, hal).await.as_deref(), Some("viewer"));

    // A personal organization takes nobody.
    let personal: Uuid =
        sqlx::query_scalar("SELECT id FROM organizations WHERE personal_user_id = $1")
            .bind(app.development_user())
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    let (status, refused) = app
        .call(
            "POST",
            &format!("/api/console/organizations/{personal}/invitations"),
            Some(json!({ "email": "x@example.com", "role": "viewer" })),
        )
        .await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (StatusCode::CONFLICT, Some("personal_organization"))
    );

    // An admin who goes takes the invitations they sent with them: the
    // removal revokes them, and one still open from a sender who may no
    // longer send it (sent before this rule) is refused when accepted.
    let ava = user(&app, "ava@acme.example").await;
    let (status, _) = app
        .call(
            "PATCH",
            &format!("/api/console/organizations/{acme}/members/{dana}"),
            Some(json!({ "role": "admin" })),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, sent) = app
        .call_as(
            dana,
            "POST",
            &invitations,
            Some(json!({ "email": "ava@acme.example", "role": "admin" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{sent}");
    let (status, _) = app
        .call(
            "DELETE",
            &format!("/api/console/organizations/{acme}/members/{dana}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = accept(ava, &token_of(&sent)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("invitation_answered")),
        "revoked with its sender's removal: {body}"
    );
    let stale = "stale-invitation-token";
    sqlx::query(
        "INSERT INTO organization_invitations
             (organization_id, email, role, token_hash, invited_by_user_id, expires_at)
         VALUES ($1, 'ava@acme.example', 'admin', $2, $3, now() + interval '1 day')",
    )
    .bind(acme)
    .bind(shared::secretbox::hash(stale))
    .bind(dana)
    .execute(&app.db.pool)
    .await
    .unwrap();
    let (status, body) = accept(ava, stale).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("invitation_revoked")),
        "{body}"
    );
    assert_eq!(role_in(&app, acme, ava).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_revoke_their_own_kubeconfigs_admins_anyones_and_admins_read_the_activity() {
    let app = TestApp::builder("organizations").host().build().await;
    let ann = user(&app, "ann@acme.example").await;
    let bob = user(&app, "bob@acme.example").await;
    let vic = user(&app, "vic@acme.example").await;
    let me = app.development_user();
    let acme = organization(
        &app,
        &[
            (me, Role::Admin),
            (ann, Role::Owner),
            (bob, Role::Member),
            (vic, Role::Viewer),
        ],
    )
    .await;
    let (_, created) = in_organization(app.client_as(bob), acme)
        .call(
            "POST",
            "/api/console/clusters",
            Some(cluster_body("shared")),
        )
        .await;
    let cluster = created["cluster"]["id"].as_str().unwrap().to_string();
    app.drive().await;
    let kubeconfigs = format!("/api/console/clusters/{cluster}/kubeconfigs");
    let app = &app;
    let issue = |who: Uuid| {
        let kubeconfigs = kubeconfigs.clone();
        async move {
            app.call_as(who, "POST", &kubeconfigs, Some(json!({})))
                .await;
            let (_, listed) = app.call_as(who, "GET", &kubeconfigs, None).await;
            listed
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["user_id"] == who.to_string() && c["status"] == "active")
                .map(|c| c["id"].as_str().unwrap().to_string())
                .expect("the kubeconfig just issued")
        }
    };
    let (anns, bobs) = (issue(ann).await, issue(bob).await);
    let revoke = |who: Uuid, id: &str| {
        let path = format!("{kubeconfigs}/{id}");
        async move { app.call_as(who, "DELETE", &path, None).await }
    };
    let (status, refused) = revoke(bob, &anns).await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden")),
        "{refused}"
    );
    assert_eq!(revoke(vic, &bobs).await.0, StatusCode::FORBIDDEN);
    assert_eq!(revoke(bob, &bobs).await.0, StatusCode::OK, "their own");
    assert_eq!(
        revoke(me, &anns).await.0,
        StatusCode::OK,
        "an admin, anyone's"
    );
    // Made a viewer, a member holds no kubeconfig: theirs end at once.
    let again = issue(bob).await;
    let (status, _) = app
        .call_as(
            ann,
            "PATCH",
            &format!("/api/console/organizations/{acme}/members/{bob}"),
            Some(json!({ "role": "viewer" })),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, ended) = app
        .call_as(ann, "GET", &format!("{kubeconfigs}/{again}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{ended}");
    assert!(
        matches!(ended["status"].as_str(), Some("revoked" | "revoking")),
        "{ended}"
    );
    let reason: Option<String> =
        sqlx::query_scalar("SELECT revoke_reason FROM kubeconfig_credentials WHERE id = $1::uuid")
            .bind(&again)
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    assert_eq!(reason.as_deref(), Some("role_changed"));
    assert_eq!(
        app.call_as(bob, "POST", &kubeconfigs, Some(json!({})))
            .await
            .0,
        StatusCode::FORBIDDEN,
        "a viewer is issued none"
    );

    // The activity: the organization's and its clusters' events, for admins.
    let activity = format!("/api/console/organizations/{acme}/activity");
    let (status, events) = app.call_as(ann, "GET", &activity, None).await;
    assert_eq!(status, StatusCode::OK, "{events}");
    let actions: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert!(actions.contains(&"kubeconfig.revoke"), "{actions:?}");
    assert!(
        events.as_array().unwrap().iter().all(|e| e["ip"].is_null()),
        "addresses stay with the platform"
    );
    // Actors by their email while they are members; one who is not (here a
    // user of the platform outside it, as an administrator would be) is not
    // named to the organization, though the platform's audit names them.
    let bobs_email: String = sqlx::query_scalar("SELECT email::text FROM users WHERE id = $1")
        .bind(bob)
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    let created_event = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "cluster.create")
        .expect("the cluster's create in its organization's activity");
    assert_eq!(created_event["actor_email"], bobs_email.as_str());
    let stranger = user(app, "stranger@elsewhere.example").await;
    sqlx::query(
        "INSERT INTO audit_events (actor_user_id, actor_kind, action, target_kind, target_id, cluster_id)
         VALUES ($1, 'admin', 'admin.looked', 'cluster', $2, $2::uuid)",
    )
    .bind(stranger)
    .bind(&cluster)
    .execute(&app.db.pool)
    .await
    .unwrap();
    let (_, events) = app.call_as(ann, "GET", &activity, None).await;
    assert_eq!(events[0]["action"], "admin.looked", "{events}");
    assert!(events[0]["actor_email"].is_null(), "{}", events[0]);
    let (status, audit) = app
        .call(
            "GET",
            &format!("/api/console/admin/audit-events?actor_user_id={stranger}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    assert_eq!(audit[0]["actor_email"], "stranger@elsewhere.example");
    let (status, page) = app
        .call_as(ann, "GET", &format!("{activity}?limit=1"), None)
        .await;
    assert_eq!(
        (status, page.as_array().map(Vec::len)),
        (StatusCode::OK, Some(1))
    );
    assert_eq!(
        app.call_as(bob, "GET", &activity, None).await.0,
        StatusCode::FORBIDDEN
    );
    let outsider = user(app, "out@elsewhere.example").await;
    assert_eq!(
        app.call_as(outsider, "GET", &activity, None).await.0,
        StatusCode::NOT_FOUND
    );
    // Another organization's events are not in it.
    let other = organization(app, &[(ann, Role::Owner)]).await;
    let (_, theirs) = app
        .call_as(
            ann,
            "GET",
            &format!("/api/console/organizations/{other}/activity"),
            None,
        )
        .await;
    assert_eq!(theirs, json!([]));
}

#[tokio::test]
async fn deleting_an_account_leaves_no_organization_without_an_owner() {
    let app = TestApp::builder("organizations").build().await;
    let ann = user(&app, "ann@acme.example").await;
    let bob = user(&app, "bob@acme.example").await;
    let acme = organization(&app, &[(ann, Role::Owner), (bob, Role::Member)]).await;
    let (status, refused) = app
        .call("DELETE", &format!("/api/console/admin/users/{ann}"), None)
        .await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (StatusCode::CONFLICT, Some("user_owns_organization")),
        "{refused}"
    );
    assert!(
        refused["detail"].as_str().unwrap().contains("Acme"),
        "{refused}"
    );
    sqlx::query("UPDATE organization_members SET role = 'owner' WHERE user_id = $1")
        .bind(bob)
        .execute(&app.db.pool)
        .await
        .unwrap();
    let (status, _) = app
        .call("DELETE", &format!("/api/console/admin/users/{ann}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        role_in(&app, acme, ann).await,
        None,
        "gone from the shared organization"
    );
    assert_eq!(role_in(&app, acme, bob).await.as_deref(), Some("owner"));
}

#[tokio::test]
async fn an_organization_sends_at_most_fifty_invitations_an_hour() {
    let app = TestApp::builder("organizations").build().await;
    let (_, acme) = app
        .call(
            "POST",
            "/api/console/organizations",
            Some(json!({ "name": "Acme" })),
        )
        .await;
    let invitations = format!(
        "/api/console/organizations/{}/invitations",
        acme["id"].as_str().unwrap()
    );
    crate::harness::clear_of_window_edge(api_organizations::INVITATIONS_PER_ORGANIZATION.window)
        .await;
    let mut statuses = Vec::new();
    for i in 0..51 {
        let (status, _) = app
            .call(
                "POST",
                &invitations,
                Some(json!({ "email": format!("p{i}@example.com"), "role": "viewer" })),
            )
            .await;
        statuses.push(status);
    }
    assert!(
        statuses[..50].iter().all(|s| *s == StatusCode::CREATED),
        "{statuses:?}"
    );
    assert_eq!(statuses[50], StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(app.count("organization_invitations").await, 50);
}

// An account that makes organizations to send more mail: its invitations
// are counted across all of them. The name an organization carries into the
// mail hides nothing and is quoted.
#[tokio::test]
async fn one_member_sends_at_most_fifty_invitations_an_hour_across_organizations() {
    let app = TestApp::builder("organizations").smtp().build().await;
    for hiding in [
        "Acme\u{202e}ecnalab ruoy",
        "Acme\u{200b}Billing",
        "KubeBYON\u{2028}Security team",
        "Acme\u{2066}x\u{2069}",
    ] {
        let (status, body) = app
            .call(
                "POST",
                "/api/console/organizations",
                Some(json!({ "name": hiding })),
            )
            .await;
        assert_eq!(
            (status, body["errors"][0]["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("name")),
            "{hiding:?}: {body}"
        );
    }
    let mut paths = Vec::new();
    for name in ["Acme", "Acme 2"] {
        let (status, made) = app
            .call(
                "POST",
                "/api/console/organizations",
                Some(json!({ "name": name })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        paths.push(format!(
            "/api/console/organizations/{}/invitations",
            made["id"].as_str().unwrap()
        ));
    }
    crate::harness::clear_of_window_edge(api_organizations::INVITATIONS_PER_INVITER.window).await;
    let mut statuses = Vec::new();
    for i in 0..51 {
        // 30 from the first organization, then from the second, which has
        // sent far fewer than its own 50.
        let path = &paths[usize::from(i >= 30)];
        let (status, _) = app
            .call(
                "POST",
                path,
                Some(json!({ "email": format!("p{i}@example.com"), "role": "viewer" })),
            )
            .await;
        statuses.push(status);
    }
    assert!(
        statuses[..50].iter().all(|s| *s == StatusCode::CREATED),
        "{statuses:?}"
    );
    assert_eq!(statuses[50], StatusCode::TOO_MANY_REQUESTS);
    // The mail's body, quoted-printable decoded.
    let decoded = |raw: &str| {
        let raw = raw.replace("=\r\n", "").replace("=\n", "");
        let mut bytes = Vec::new();
        let mut rest = raw.as_bytes();
        while let Some((&first, tail)) = rest.split_first() {
            let hex = tail
                .get(..2)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match (first, hex) {
                (b'=', Some(byte)) => {
                    bytes.push(byte);
                    rest = &tail[2..];
                }
                _ => {
                    bytes.push(first);
                    rest = tail;
                }
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    };
    tests::eventually(10, "the invitation's mail", || {
        let messages = app.mail().messages();
        async move {
            messages
                .iter()
                .map(|m| decoded(m))
                .any(|m| {
                    m.contains("To: p0@example.com")
                        && m.contains("You are invited to join the organization “Acme” as viewer")
                })
                .then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_organizations_api_key_acts_in_it_alone_with_its_role_and_outlives_its_maker() {
    let app = TestApp::builder("organization-keys")
        .accounts()
        .smtp()
        .build()
        .await;
    const PASSWORD: &str = "correct horse battery staple";
    let owner = app
        .client()
        .ip("198.51.100.7")
        .sign_up(app.mail(), "owner@acme.example", PASSWORD)
        .await;
    let admin = app
        .client()
        .ip("198.51.100.8")
        .sign_up(app.mail(), "admin@acme.example", PASSWORD)
        .await;
    let (_, acme) = owner
        .call(
            "POST",
            "/api/console/organizations",
            Some(json!({ "name": "Acme" })),
        )
        .await;
    let acme: Uuid = acme["id"].as_str().unwrap().parse().unwrap();
    let admin_id: Uuid =
        sqlx::query_scalar("SELECT id FROM users WHERE email = 'admin@acme.example'")
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    sqlx::query("INSERT INTO organization_members (organization_id, user_id, role) VALUES ($1, $2, 'admin')")
        .bind(acme)
        .bind(admin_id)
        .execute(&app.db.pool)
        .await
        .unwrap();
    let keys = format!("/api/console/organizations/{acme}/api-keys");

    // Made by an admin from a session with the password asked again; never
    // an owner's key.
    let (status, body) = admin
        .call(
            "POST",
            &keys,
            Some(json!({ "name": "ci", "role": "owner", "password": PASSWORD })),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = admin
        .call(
            "POST",
            &keys,
            Some(json!({ "name": "ci", "role": "member", "password": "wrong" })),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, made) = admin
        .call(
            "POST",
            &keys,
            Some(json!({ "name": "ci", "role": "member", "password": PASSWORD })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let key = app.client().bearer(made["key"].as_str().unwrap());
    assert_eq!(made["api_key"]["role"], "member");
    assert_eq!(made["api_key"]["created_by_email"], "admin@acme.example");
    // A key cannot make keys, even of its own organization.
    let (status, _) = key
        .call(
            "POST",
            &keys,
            Some(json!({ "name": "more", "role": "member" })),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // It acts in its organization without a header.
    let (status, created) = key
        .call(
            "POST",
            "/api/console/clusters",
            Some(cluster_body("built-by-ci")),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{created}");
    assert_eq!(created["cluster"]["organization_id"], acme.to_string());
    let (_, listed) = key.call("GET", "/api/console/clusters", None).await;
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    // And nowhere else: not in its maker's or anyone's personal
    // organization, by id or by header.
    let (status, personal) = owner
        .call("POST", "/api/console/clusters", Some(cluster_body("mine")))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{personal}");
    let personal_cluster = personal["cluster"]["id"].as_str().unwrap();
    let personal_organization = personal["cluster"]["organization_id"].as_str().unwrap();
    let (status, _) = key
        .call(
            "GET",
            &format!("/api/console/clusters/{personal_cluster}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = key
        .clone()
        .header("kubebyon-organization", personal_organization)
        .call("GET", "/api/console/clusters", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Its role is a member's: no deleting clusters, no reading orders.
    let acme_cluster = created["cluster"]["id"].as_str().unwrap();
    let (status, body) = key
        .call(
            "DELETE",
            &format!("/api/console/clusters/{acme_cluster}"),
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
    let (status, _) = key.call("GET", "/api/console/billing/orders", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Nothing of its maker's account or of the organization's people.
    for path in [
        "/api/console/account/activity",
        "/api/console/account/sessions",
        "/api/console/account/api-keys",
        "/api/console/organizations",
        &format!("/api/console/organizations/{acme}/members"),
    ] {
        let (status, body) = key.call("GET", path, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
    }
    // The maker's own keys are theirs alone: the organization's is not among them.
    let (_, personal_keys) = admin
        .call("GET", "/api/console/account/api-keys", None)
        .await;
    assert_eq!(personal_keys, json!([]));

    // The maker leaves: the key, the organization's, goes on.
    let (status, _) = owner
        .call(
            "DELETE",
            &format!("/api/console/organizations/{acme}/members/{admin_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = key.call("GET", "/api/console/clusters", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = admin.call("GET", &keys, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Its owners see who made it and revoke it: it stops at once.
    let (_, listed) = owner.call("GET", &keys, None).await;
    assert_eq!(
        listed[0]["created_by_email"], "admin@acme.example",
        "{listed}"
    );
    let key_id = listed[0]["id"].as_str().unwrap();
    let (status, revoked) = owner
        .call("DELETE", &format!("{keys}/{key_id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    assert!(revoked["revoked_at"].is_string());
    let (status, _) = key.call("GET", "/api/console/clusters", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // A viewer's key reads and writes nothing.
    let (status, made) = owner
        .call(
            "POST",
            &keys,
            Some(json!({ "name": "dashboards", "role": "viewer", "password": PASSWORD })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let viewer = app.client().bearer(made["key"].as_str().unwrap());
    let (status, _) = viewer.call("GET", "/api/console/clusters", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = viewer
        .call("POST", "/api/console/clusters", Some(cluster_body("no")))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_events WHERE target_id = $1 AND action LIKE 'organization.api_key%'
         ORDER BY id",
    )
    .bind(acme.to_string())
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(
        actions,
        [
            "organization.api_key_created",
            "organization.api_key_revoked",
            "organization.api_key_created"
        ]
    );
}
