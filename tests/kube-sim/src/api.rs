//! The REST surface: discovery, CRUD, apply and merge patch, the status
//! subresource, and watch streams, answered with Kubernetes `Status` errors.

use std::{collections::HashMap, sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    extract::{Extension, State},
    http::{HeaderMap, Method, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio_stream::wrappers::BroadcastStream;

use crate::{
    Shared,
    registry::{self, ResourceType},
    store::{ApiError, Event, fields_match, index_of, labels_match},
    tls::ClientCertificate,
};

fn respond(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(crate) fn error(err: ApiError) -> Response {
    respond(
        StatusCode::from_u16(err.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &err.status(),
    )
}

/// What a path names.
struct Target {
    resource: &'static ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
    /// `POST pods/<name>/eviction`.
    eviction: bool,
    /// `POST serviceaccounts/<name>/token` (the TokenRequest API).
    token_request: bool,
    /// `certificatesigningrequests/<name>/approval` (also `status`: it
    /// writes only the status).
    approval: bool,
}

enum Route {
    Json(Value),
    Resource(Target),
}

fn route(path: &str) -> Result<Route, ApiError> {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let not_found = || ApiError {
        code: 404,
        reason: "NotFound",
        message: "the server could not find the requested resource".into(),
    };
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => {
            return Ok(Route::Json(
                json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-kube-sim",
                "platform": "linux/amd64", "goVersion": "go1.24", "compiler": "gc",
                "buildDate": "2026-01-01T00:00:00Z", "gitCommit": "kube-sim", "gitTreeState": "clean"}),
            ));
        }
        ["openapi", "v3"] => return Ok(Route::Json(registry::openapi_v3_root())),
        ["openapi", "v3", "api", version] => {
            return registry::openapi_v3_group_version("", version)
                .map(Route::Json)
                .ok_or_else(not_found);
        }
        ["openapi", "v3", "apis", group, version] => {
            return registry::openapi_v3_group_version(group, version)
                .map(Route::Json)
                .ok_or_else(not_found);
        }
        ["api"] => return Ok(Route::Json(registry::api_versions())),
        ["apis"] => return Ok(Route::Json(registry::api_group_list())),
        ["api", version] => {
            return registry::api_resource_list("", version)
                .map(Route::Json)
                .ok_or_else(not_found);
        }
        ["apis", group, version] => {
            return registry::api_resource_list(group, version)
                .map(Route::Json)
                .ok_or_else(not_found);
        }
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(not_found()),
    };
    let find = |plural: &str| registry::find(group, version, plural).ok_or_else(not_found);
    let target = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if registry::find(group, version, plural).is_some_and(|r| r.namespaced) =>
        {
            let (name, status, eviction, token_request) = match tail {
                [] => (None, false, false, false),
                [name] => (Some(name.to_string()), false, false, false),
                [name, "status"] => (Some(name.to_string()), true, false, false),
                [name, "eviction"] if *plural == "pods" => {
                    (Some(name.to_string()), false, true, false)
                }
                [name, "token"] if *plural == "serviceaccounts" => {
                    (Some(name.to_string()), false, false, true)
                }
                _ => return Err(not_found()),
            };
            Target {
                resource: find(plural)?,
                namespace: Some(ns.to_string()),
                name,
                status,
                eviction,
                token_request,
                approval: false,
            }
        }
        [plural] => Target {
            resource: find(plural)?,
            namespace: None,
            name: None,
            status: false,
            eviction: false,
            token_request: false,
            approval: false,
        },
        [plural, name] => Target {
            resource: find(plural)?,
            namespace: None,
            name: Some(name.to_string()),
            status: false,
            eviction: false,
            token_request: false,
            approval: false,
        },
        // A CertificateSigningRequest's approval is written through its
        // `approval` subresource, which, like `status`, changes only the status.
        [plural, name, sub @ ("status" | "approval")]
            if *sub == "status" || *plural == "certificatesigningrequests" =>
        {
            Target {
                resource: find(plural)?,
                namespace: None,
                name: Some(name.to_string()),
                status: true,
                eviction: false,
                token_request: false,
                approval: *sub == "approval",
            }
        }
        _ => return Err(not_found()),
    };
    if target.name.is_some() && target.resource.namespaced && target.namespace.is_none() {
        return Err(not_found());
    }
    Ok(Route::Resource(target))
}

pub(crate) fn query(uri: &Uri) -> HashMap<String, String> {
    query_pairs(uri).collect()
}

/// Every `key=value` of the query, in order, repeated keys included.
pub(crate) fn query_pairs(uri: &Uri) -> impl Iterator<Item = (String, String)> + '_ {
    uri.query().into_iter().flat_map(|q| {
        q.split('&').filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((decode(k)?, decode(v)?))
        })
    })
}

fn decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                out.push(
                    u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?, 16).ok()?,
                );
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The answer a request gets before its path is looked at, if any: 503 when
/// the API is down, the unauthenticated `before_auth` routes, then 401 without
/// a bearer token it accepts or a client certificate its CA signed.
fn unavailable(shared: &Shared) -> Option<Response> {
    shared.faults.lock().expect("lock").api_down.then(|| {
        error(ApiError {
            code: 503,
            reason: "ServiceUnavailable",
            message: "the server is currently unable to handle the request".into(),
        })
    })
}

/// Whether a request comes with no credential to a control plane that
/// serves anonymous requests (kube-apiserver's `--anonymous-auth`, on in
/// kubeadm's control planes): it is `system:anonymous`, and RBAC decides.
fn anonymous(shared: &Shared, headers: &HeaderMap, client: bool) -> bool {
    shared.options.role == crate::Role::Kamaji
        && !client
        && !headers.contains_key(header::AUTHORIZATION)
}

pub(crate) fn refuse(
    shared: &Shared,
    headers: &HeaderMap,
    client: Option<&ClientCertificate>,
    before_auth: impl FnOnce() -> Option<Response>,
) -> Option<Response> {
    if let Some(down) = unavailable(shared) {
        return Some(down);
    }
    if let Some(response) = before_auth() {
        return Some(response);
    }
    let token = shared.token.as_ref()?;
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let accepted = client.is_some()
        || anonymous(shared, headers, client.is_some())
        || presented.is_some_and(|presented| {
            presented == token.as_str()
                || crate::tokens::valid(shared, presented)
                || crate::bootstrap::identity(shared, presented).is_some()
        });
    (!accepted).then(|| {
        error(ApiError {
            code: 401,
            reason: "Unauthorized",
            message: "Unauthorized".into(),
        })
    })
}

/// What a path the server does not serve answers.
fn not_served() -> ApiError {
    ApiError {
        code: 404,
        reason: "NotFound",
        message: "the server could not find the requested resource".into(),
    }
}

pub async fn handle(
    State(shared): State<Arc<Shared>>,
    client: Option<Extension<ClientCertificate>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let client = client.map(|Extension(client)| client);
    if shared.options.role == crate::Role::VCluster && uri.path() == "/node/join" {
        if let Some(down) = unavailable(&shared) {
            return down;
        }
        return crate::join::handle(&shared, &method, &uri, &headers).await;
    }
    if let Some(refused) = refuse(&shared, &headers, client.as_ref(), || None) {
        return refused;
    }
    if let Some(group) = uri
        .path()
        .strip_prefix("/apis/")
        .and_then(|rest| rest.split('/').next())
        && shared
            .faults
            .lock()
            .expect("lock")
            .unserved_groups
            .iter()
            .any(|g| g == group)
    {
        return error(not_served());
    }
    let target = match route(uri.path()) {
        Ok(Route::Json(mut value)) if method == Method::GET => {
            // The group list names only the groups served.
            if uri.path().trim_end_matches('/') == "/apis"
                && let Some(groups) = value["groups"].as_array_mut()
            {
                let unserved = shared.faults.lock().expect("lock").unserved_groups.clone();
                groups.retain(|g| !unserved.iter().any(|u| g["name"] == u.as_str()));
            }
            // A group version lists only the resources it serves, and is not
            // there without any.
            if let Some(group_version) = value["groupVersion"].as_str().map(str::to_string)
                && let Some(resources) = value["resources"].as_array_mut()
            {
                let unserved = shared
                    .faults
                    .lock()
                    .expect("lock")
                    .unserved_resources
                    .clone();
                resources.retain(|r| {
                    let plural = r["name"].as_str().unwrap_or_default();
                    let plural = plural.split('/').next().unwrap_or_default();
                    !unserved.contains(&format!("{group_version}/{plural}"))
                });
                if resources.is_empty() {
                    return error(not_served());
                }
            }
            return respond(StatusCode::OK, &value);
        }
        Ok(Route::Json(_)) => {
            return error(ApiError {
                code: 405,
                reason: "MethodNotAllowed",
                message: "method not allowed".into(),
            });
        }
        Ok(Route::Resource(target)) => target,
        Err(err) => return error(err),
    };
    let resource = target.resource;
    let unserved = format!(
        "{}/{}/{}",
        resource.group, resource.version, resource.plural
    );
    if shared
        .faults
        .lock()
        .expect("lock")
        .unserved_resources
        .contains(&unserved)
    {
        return error(not_served());
    }
    let params = query(&uri);
    if let Some(denied) = authorize(
        &shared,
        &method,
        &target,
        &params,
        &headers,
        client.as_ref(),
    )
    .await
    {
        return error(denied);
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    if let Some(denied) = rbac_denies(
        &shared,
        &method,
        &target,
        &params,
        rbac_identity(&shared, &headers, client.is_some()),
        &content_type,
        &body,
    ) {
        return error(denied);
    }
    if let Err(err) = admit(
        &shared,
        &method,
        &target,
        &params,
        &headers,
        client.as_ref(),
        &content_type,
        &body,
    )
    .await
    {
        return error(err);
    }
    let result = match (&method, &target.name) {
        (&Method::GET, None) if matches!(params.get("watch").map(String::as_str), Some("true" | "1")) => {
            return watch(&shared, &target, &params);
        }
        (&Method::GET, None) => list(&shared, &target, &params),
        (&Method::GET, Some(name)) => {
            let store = shared.store.lock().expect("lock");
            store.get(target.resource, target.namespace.as_deref().unwrap_or(""), name).map(|o| (StatusCode::OK, o))
        }
        (&Method::POST, Some(name)) if target.eviction => evict(&shared, &target, name),
        (&Method::POST, Some(name)) if target.token_request => object_of(&content_type, &body).and_then(|request| {
            crate::tokens::request(&shared, target.namespace.as_deref().unwrap_or_default(), name, &request)
                .map(|issued| (StatusCode::CREATED, issued))
        }),
        (&Method::POST, None) => object_of(&content_type, &body).and_then(|mut object| {
            if target.resource.kind == "CertificateSigningRequest" {
                // The requester is whoever sent it, whatever the body says
                // (the registry's PrepareForCreate).
                let (user, groups) = sender(&shared, &headers, client.as_ref());
                object["spec"]["username"] = json!(user);
                object["spec"]["groups"] = json!(groups);
            }
            let namespace = target.namespace.clone().unwrap_or_default();
            if let Some(body_ns) = object.pointer("/metadata/namespace").and_then(Value::as_str)
                && target.resource.namespaced
                && body_ns != namespace
            {
                return Err(ApiError::bad_request(format!(
                    "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({namespace})"
                )));
            }
            let mut store = shared.store.lock().expect("lock");
            store.create(target.resource, &namespace, object).map(|o| (StatusCode::CREATED, o))
        }),
        (&Method::PUT, Some(name)) => object_of(&content_type, &body).and_then(|object| {
            let mut store = shared.store.lock().expect("lock");
            store
                .replace(target.resource, target.namespace.as_deref().unwrap_or(""), name, object, target.status)
                .map(|o| (StatusCode::OK, o))
        }),
        (&Method::PATCH, Some(name)) => parse(&body).and_then(|patch| {
            let namespace = target.namespace.clone().unwrap_or_default();
            let mut store = shared.store.lock().expect("lock");
            match content_type.as_str() {
                "application/apply-patch+yaml" => {
                    let manager = params
                        .get("fieldManager")
                        .filter(|m| !m.is_empty())
                        .ok_or_else(|| ApiError::bad_request("PATCH with apply-patch requires fieldManager"))?;
                    let existed = store.get(target.resource, &namespace, name).is_ok();
                    store
                        .apply(target.resource, &namespace, name, &patch, manager, target.status)
                        .map(|o| (if existed { StatusCode::OK } else { StatusCode::CREATED }, o))
                }
                "application/merge-patch+json" | "application/strategic-merge-patch+json" => store
                    .merge_patch(target.resource, &namespace, name, &patch, target.status)
                    .map(|o| (StatusCode::OK, o)),
                other => Err(ApiError {
                    code: 415,
                    reason: "UnsupportedMediaType",
                    message: format!("the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {other})"),
                }),
            }
        }),
        (&Method::DELETE, Some(name)) => {
            let mut store = shared.store.lock().expect("lock");
            store
                .delete(target.resource, target.namespace.as_deref().unwrap_or(""), name)
                .map(|o| (StatusCode::OK, o))
        }
        _ => Err(ApiError {
            code: 405,
            reason: "MethodNotAllowed",
            message: format!("{method} is not supported on this path"),
        }),
    };
    // kube-apiserver allocates a Service's node ports as it writes it: the
    // answer, and any read after it, has them.
    let result = match result {
        Ok((code, object))
            if target.resource.kind == "Service"
                && matches!(method, Method::POST | Method::PUT | Method::PATCH) =>
        {
            let namespace = object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let mut store = shared.store.lock().expect("lock");
            crate::behaviour::allocate_service_ports(&shared, &mut store, &namespace, &name);
            let allocated = store
                .get(target.resource, &namespace, &name)
                .unwrap_or(object);
            Ok((code, allocated))
        }
        other => other,
    };
    let table = method == Method::GET
        && crate::table::wanted(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    match result {
        Ok((code, object)) if table => {
            let objects = match object["items"].as_array() {
                Some(items) => items.clone(),
                None => vec![object.clone()],
            };
            let version = object
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default();
            respond(code, &crate::table::of(target.resource, &objects, version))
        }
        Ok((code, object)) => {
            shared.wake.notify_waiters();
            respond(code, &object)
        }
        Err(err) => error(err),
    }
}

/// Who sent a request: the admin's token is `system:masters`, then a
/// token's holder, a client certificate's subject, or `system:anonymous`.
fn sender(
    shared: &Shared,
    headers: &HeaderMap,
    client: Option<&ClientCertificate>,
) -> (String, Vec<String>) {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if token.is_some() && shared.token.as_deref() == token {
        return (
            "kubernetes-admin".into(),
            vec!["system:masters".into(), "system:authenticated".into()],
        );
    }
    requester(shared, headers, client)
        .or_else(|| client.map(|c| (c.user.clone(), c.groups.clone())))
        .unwrap_or_else(|| {
            (
                "system:anonymous".into(),
                vec!["system:unauthenticated".into()],
            )
        })
}

/// Who an authorizer is asked about: a token's holder, or a client
/// certificate's when no token comes. `None` for the admin (its token, or a
/// certificate in `system:masters`, which no authorizer is asked about) and
/// for nobody.
fn requester(
    shared: &Shared,
    headers: &HeaderMap,
    client: Option<&ClientCertificate>,
) -> Option<(String, Vec<String>)> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if token.is_some() && shared.token.as_deref() == token {
        return None;
    }
    let (user, groups) = match (token, client) {
        (Some(token), _) => crate::tokens::identity(shared, token)
            .or_else(|| crate::bootstrap::identity(shared, token))?,
        (None, Some(client)) => (client.user.clone(), client.groups.clone()),
        (None, None) => return None,
    };
    (!groups.iter().any(|g| g == "system:masters")).then_some((user, groups))
}

/// Asks the webhook authorizer, when the cluster has one, about a request
/// of any identity but the cluster's admin (a token's, or a client
/// certificate's when no token comes); the refusal when it denies it.
async fn authorize(
    shared: &Shared,
    method: &Method,
    target: &Target,
    params: &HashMap<String, String>,
    headers: &HeaderMap,
    client: Option<&ClientCertificate>,
) -> Option<ApiError> {
    let authorizer = shared.options.authorizer.as_ref()?;
    let (mut user, mut groups) = requester(shared, headers, client)?;
    // Impersonation (`kubectl --as`, `--as-group`): the API server asks the
    // authorizers whether the requester may `impersonate` each user and
    // group, then serves the request as them; `system:masters` is never
    // asked about again.
    if let Some(target) = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
    {
        let as_groups: Vec<String> = headers
            .get_all("impersonate-group")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect();
        let asked = std::iter::once(("users", target.to_string()))
            .chain(as_groups.iter().map(|g| ("groups", g.clone())));
        for (resource, name) in asked {
            let attributes = json!({
                "verb": "impersonate", "group": "", "version": "v1", "resource": resource,
                "subresource": "", "namespace": "", "name": name,
            });
            if let Some(reason) = authorizer.denies(&user, &groups, attributes).await {
                return Some(ApiError {
                    code: 403,
                    reason: "Forbidden",
                    message: format!(
                        "{resource} \"{name}\" is forbidden: User \"{user}\" cannot impersonate resource \"{resource}\" in API group \"\" at the cluster scope: {reason}"
                    ),
                });
            }
        }
        if as_groups.iter().any(|g| g == "system:masters") {
            return None;
        }
        user = target.to_string();
        groups = as_groups;
        groups.push("system:authenticated".into());
    }
    let verb = verb_of(method, target, params)?;
    let subresource = subresource_of(target);
    let resource = target.resource;
    let namespace = target.namespace.clone().unwrap_or_default();
    let name = target.name.clone().unwrap_or_default();
    let attributes = json!({
        "verb": verb, "group": resource.group, "version": resource.version,
        "resource": resource.plural, "subresource": subresource,
        "namespace": namespace, "name": name,
    });
    let reason = authorizer.denies(&user, &groups, attributes).await?;
    Some(forbidden(
        &user,
        &crate::rbac::Attributes {
            verb: verb.into(),
            group: resource.group.into(),
            resource: resource.plural.into(),
            subresource: subresource.into(),
            namespace,
            name,
        },
        Some(&reason),
    ))
}

/// The verb a request is authorized as.
fn verb_of(
    method: &Method,
    target: &Target,
    params: &HashMap<String, String>,
) -> Option<&'static str> {
    let watch = matches!(params.get("watch").map(String::as_str), Some("true" | "1"));
    Some(match (method, &target.name) {
        (&Method::GET, Some(_)) => "get",
        (&Method::GET, None) if watch => "watch",
        (&Method::GET, None) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, Some(_)) => "delete",
        (&Method::DELETE, None) => "deletecollection",
        _ => return None,
    })
}

fn subresource_of(target: &Target) -> &'static str {
    match target {
        t if t.approval => "approval",
        t if t.status => "status",
        t if t.eviction => "eviction",
        t if t.token_request => "token",
        _ => "",
    }
}

/// kube-apiserver's wording of an authorizer's refusal.
fn forbidden(user: &str, request: &crate::rbac::Attributes, reason: Option<&str>) -> ApiError {
    let kind = match request.group.as_str() {
        "" => request.resource.clone(),
        group => format!("{}.{group}", request.resource),
    };
    let object = if request.name.is_empty() {
        kind
    } else {
        format!("{kind} \"{}\"", request.name)
    };
    let full = match request.subresource.as_str() {
        "" => request.resource.clone(),
        sub => format!("{}/{sub}", request.resource),
    };
    let scope = if request.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", request.namespace)
    };
    let reason = reason.map(|r| format!(": {r}")).unwrap_or_default();
    ApiError {
        code: 403,
        reason: "Forbidden",
        message: format!(
            "{object} is forbidden: User \"{user}\" cannot {} resource \"{full}\" in API group \"{}\" {scope}{reason}",
            request.verb, request.group
        ),
    }
}

/// The identity RBAC decides about: a bootstrap token's holder, or an
/// anonymous request where one is served, always; a token the TokenRequest
/// API issued (never the admin's, which is `system:masters`) when the host
/// enforces RBAC.
fn rbac_identity(
    shared: &Shared,
    headers: &HeaderMap,
    client: bool,
) -> Option<(String, Vec<String>)> {
    if anonymous(shared, headers, client) {
        return Some((
            "system:anonymous".into(),
            vec!["system:unauthenticated".into()],
        ));
    }
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))?;
    if shared.token.as_deref() == Some(token) {
        return None;
    }
    if let Some(identity) = crate::bootstrap::identity(shared, token) {
        return Some(identity);
    }
    if !shared.options.rbac {
        return None;
    }
    crate::tokens::identity(shared, token)
}

/// Asks RBAC about `request` (see `rbac`), keeping its answer; the refusal
/// when it denies it.
pub(crate) fn rbac_check(
    shared: &Shared,
    user: &str,
    groups: &[String],
    request: &crate::rbac::Attributes,
) -> Option<ApiError> {
    let allowed = crate::rbac::allows(&shared.store.lock().expect("lock"), user, groups, request);
    keep_access(shared, user, request, allowed);
    (!allowed).then(|| forbidden(user, request, None))
}

fn keep_access(shared: &Shared, user: &str, request: &crate::rbac::Attributes, allowed: bool) {
    shared
        .access
        .lock()
        .expect("lock")
        .push(crate::rbac::Access {
            user: user.to_string(),
            verb: request.verb.clone(),
            group: request.group.clone(),
            resource: match request.subresource.as_str() {
                "" => request.resource.clone(),
                sub => format!("{}/{sub}", request.resource),
            },
            namespace: request.namespace.clone(),
            name: request.name.clone(),
            allowed,
        });
}

/// `pods/exec` as the webhook authorizer is asked about it, when the
/// cluster has one: `create` for a POST (SPDY), `get` for a WebSocket's GET
/// (kube-apiserver before the `AuthorizePodWebsocketUpgradeCreatePermission`
/// gate); the refusal when it denies it.
pub(crate) async fn authorizer_denies_exec(
    shared: &Shared,
    method: &Method,
    headers: &HeaderMap,
    client: Option<&ClientCertificate>,
    namespace: &str,
    pod: &str,
) -> Option<ApiError> {
    let authorizer = shared.options.authorizer.as_ref()?;
    let (user, groups) = requester(shared, headers, client)?;
    let verb = if method == Method::GET {
        "get"
    } else {
        "create"
    };
    let attributes = json!({
        "verb": verb, "group": "", "version": "v1", "resource": "pods",
        "subresource": "exec", "namespace": namespace, "name": pod,
    });
    let reason = authorizer.denies(&user, &groups, attributes).await?;
    Some(forbidden(
        &user,
        &crate::rbac::Attributes {
            verb: verb.into(),
            group: String::new(),
            resource: "pods".into(),
            subresource: "exec".into(),
            namespace: namespace.into(),
            name: pod.into(),
        },
        Some(&reason),
    ))
}

/// `pods/exec` as RBAC sees it, for the exec route: `create` for a SPDY
/// POST; for a WebSocket's GET, `get`, and `create` too where kube-apiserver
/// checks the upgrade (the `AuthorizePodWebsocketUpgradeCreatePermission`
/// gate): both are asked, so a role passes only with what every version
/// needs.
pub(crate) fn rbac_denies_exec(
    shared: &Shared,
    method: &Method,
    headers: &HeaderMap,
    client: bool,
    namespace: &str,
    pod: &str,
) -> Option<ApiError> {
    let (user, groups) = rbac_identity(shared, headers, client)?;
    let verbs: &[&str] = if method == Method::GET {
        &["get", "create"]
    } else {
        &["create"]
    };
    verbs.iter().find_map(|verb| {
        let request = crate::rbac::Attributes {
            verb: (*verb).into(),
            group: String::new(),
            resource: "pods".into(),
            subresource: "exec".into(),
            namespace: namespace.into(),
            name: pod.into(),
        };
        rbac_check(shared, &user, &groups, &request)
    })
}

/// RBAC's answer to a request of a ServiceAccount: its verb on the object;
/// an apply that would create the object needs `create` too; and writing
/// RBAC objects must not grant more than the writer holds (see `rbac`).
fn rbac_denies(
    shared: &Shared,
    method: &Method,
    target: &Target,
    params: &HashMap<String, String>,
    identity: Option<(String, Vec<String>)>,
    content_type: &str,
    body: &Bytes,
) -> Option<ApiError> {
    let (user, groups) = identity?;
    let verb = verb_of(method, target, params)?;
    let namespace = target.namespace.clone().unwrap_or_default();
    let request = crate::rbac::Attributes {
        verb: verb.into(),
        group: target.resource.group.into(),
        resource: target.resource.plural.into(),
        subresource: subresource_of(target).into(),
        namespace: namespace.clone(),
        name: target.name.clone().unwrap_or_default(),
    };
    if let Some(denied) = rbac_check(shared, &user, &groups, &request) {
        return Some(denied);
    }
    let creates = method == Method::PATCH
        && content_type == "application/apply-patch+yaml"
        && target.name.as_deref().is_some_and(|name| {
            shared
                .store
                .lock()
                .expect("lock")
                .get(target.resource, &namespace, name)
                .is_err()
        });
    if creates {
        let create = crate::rbac::Attributes {
            verb: "create".into(),
            ..request.clone()
        };
        if let Some(denied) = rbac_check(shared, &user, &groups, &create) {
            return Some(denied);
        }
    }
    // Only writes of RBAC objects can escalate: no other body is read.
    if target.resource.group != "rbac.authorization.k8s.io" {
        return None;
    }
    // An apply or a create sends the object; a merge patch the fields it sets.
    let object = object_of(content_type, body)
        .or_else(|_| parse(body))
        .ok()?;
    let named = crate::rbac::Attributes {
        name: object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or(request.name.clone()),
        ..request
    };
    let mut asked = Vec::new();
    let reason = crate::rbac::escalation(
        &shared.store.lock().expect("lock"),
        &user,
        &groups,
        &named,
        &object,
        &mut |attributes, allowed| asked.push((attributes.clone(), allowed)),
    );
    for (attributes, allowed) in &asked {
        keep_access(shared, &user, attributes, *allowed);
    }
    let reason = reason?;
    // The write itself is what was refused.
    keep_access(shared, &user, &named, false);
    let kind = format!("{}.{}", named.resource, named.group);
    Some(ApiError {
        code: 403,
        reason: "Forbidden",
        message: format!("{kind} \"{}\" is forbidden: {reason}", named.name),
    })
}

/// Asks the validating webhooks about a create, replace, merge patch or
/// apply of a main resource (not its status, an eviction or a token
/// request), with the object as it would be stored.
#[allow(clippy::too_many_arguments)]
async fn admit(
    shared: &Shared,
    method: &Method,
    target: &Target,
    params: &HashMap<String, String>,
    headers: &HeaderMap,
    client: Option<&ClientCertificate>,
    content_type: &str,
    body: &Bytes,
) -> Result<(), ApiError> {
    if target.status || target.eviction || target.token_request {
        return Ok(());
    }
    let namespace = target.namespace.clone().unwrap_or_default();
    let stored = |name: &str| {
        shared
            .store
            .lock()
            .expect("lock")
            .get(target.resource, &namespace, name)
            .ok()
    };
    let (operation, name, object, old) = match (method, &target.name) {
        (&Method::POST, None) => {
            let Ok(object) = object_of(content_type, body) else {
                return Ok(());
            };
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            ("CREATE", name, object, None)
        }
        (&Method::PUT, Some(name)) => {
            let (Ok(object), Some(old)) = (object_of(content_type, body), stored(name)) else {
                return Ok(());
            };
            ("UPDATE", name.clone(), object, Some(old))
        }
        (&Method::PATCH, Some(name)) => {
            let Ok(patch) = parse(body) else {
                return Ok(());
            };
            match stored(name) {
                Some(old) => {
                    let mut object = old.clone();
                    crate::store::merge(&mut object, &patch);
                    ("UPDATE", name.clone(), object, Some(old))
                }
                None if content_type == "application/apply-patch+yaml" => {
                    ("CREATE", name.clone(), patch, None)
                }
                None => return Ok(()),
            }
        }
        _ => return Ok(()),
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let user = if presented.is_some() && presented == shared.token.as_deref() {
        crate::admission::admin()
    } else if let (None, Some(client)) = (presented, client) {
        // A client certificate: its subject, as the API server read it.
        let mut groups = client.groups.clone();
        groups.push("system:authenticated".into());
        json!({"username": client.user, "groups": groups})
    } else {
        json!({"username": "system:serviceaccount", "groups": ["system:serviceaccounts", "system:authenticated"]})
    };
    if target.resource.kind == "TenantControlPlane" && shared.options.role == crate::Role::Host {
        crate::kamaji::admit(&object, old.as_ref())?;
    }
    let attributes = crate::admission::Attributes {
        resource: target.resource,
        namespace: &namespace,
        name: &name,
        operation,
        object: &object,
        old_object: old.as_ref(),
        dry_run: params.contains_key("dryRun"),
        user,
    };
    crate::admission::validate(shared, &attributes).await
}

/// The Eviction API: deletes the pod unless evictions are blocked, as a
/// PodDisruptionBudget would block them (429).
fn evict(shared: &Shared, target: &Target, name: &str) -> Result<(StatusCode, Value), ApiError> {
    if shared.faults.lock().expect("lock").evictions_blocked {
        return Err(ApiError {
            code: 429,
            reason: "TooManyRequests",
            message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        });
    }
    let mut store = shared.store.lock().expect("lock");
    store.delete(
        target.resource,
        target.namespace.as_deref().unwrap_or(""),
        name,
    )?;
    Ok((
        StatusCode::CREATED,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

/// The object a create or replace sends: JSON, or protobuf for the built-in
/// kinds kubectl's typed clients send that way.
fn object_of(content_type: &str, body: &Bytes) -> Result<Value, ApiError> {
    match content_type {
        "application/json" => parse(body),
        "application/vnd.kubernetes.protobuf" => {
            crate::protobuf::decode(body).map_err(|reason| ApiError {
                code: 415,
                reason: "UnsupportedMediaType",
                message: format!("the protobuf body could not be read: {reason}"),
            })
        }
        other => Err(ApiError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/vnd.kubernetes.protobuf (got {other})"
            ),
        }),
    }
}

fn parse(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}")))
}

fn list(
    shared: &Shared,
    target: &Target,
    params: &HashMap<String, String>,
) -> Result<(StatusCode, Value), ApiError> {
    let store = shared.store.lock().expect("lock");
    let items = store.list(
        target.resource,
        target.namespace.as_deref(),
        params.get("labelSelector").map(String::as_str),
        params.get("fieldSelector").map(String::as_str),
    )?;
    Ok((
        StatusCode::OK,
        json!({
            "apiVersion": target.resource.api_version(),
            "kind": format!("{}List", target.resource.kind),
            "metadata": {"resourceVersion": store.resource_version().to_string()},
            "items": items,
        }),
    ))
}

fn matches(
    event: &Event,
    resource: usize,
    target: &Target,
    params: &HashMap<String, String>,
) -> bool {
    event.resource == resource
        && target
            .namespace
            .as_deref()
            .is_none_or(|ns| ns == event.namespace)
        && params
            .get("labelSelector")
            .is_none_or(|s| labels_match(s, &event.object).unwrap_or(false))
        && params
            .get("fieldSelector")
            .is_none_or(|s| fields_match(s, &event.object).unwrap_or(false))
}

fn line(kind: &str, object: &Value) -> Result<Bytes, std::io::Error> {
    Ok(Bytes::from(format!(
        "{}\n",
        json!({"type": kind, "object": object})
    )))
}

fn watch(shared: &Arc<Shared>, target: &Target, params: &HashMap<String, String>) -> Response {
    let resource = index_of(target.resource);
    let since: Option<u64> = params
        .get("resourceVersion")
        .and_then(|rv| rv.parse().ok())
        .filter(|rv| *rv != 0);
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(shared.default_watch_timeout);
    let (initial, receiver, after) = {
        let store = shared.store.lock().expect("lock");
        let receiver = store.subscribe();
        let after = since.unwrap_or(0).max(store.resource_version());
        let initial: Vec<Result<Bytes, std::io::Error>> = match since {
            Some(rv) => match store.events_since(rv) {
                Some(events) => events
                    .iter()
                    .filter(|e| matches(e, resource, target, params))
                    .map(|e| line(e.kind, &e.object))
                    .collect(),
                None => vec![line(
                    "ERROR",
                    &ApiError {
                        code: 410,
                        reason: "Expired",
                        message: format!("too old resource version: {rv}"),
                    }
                    .status(),
                )],
            },
            None => match store.list(
                target.resource,
                target.namespace.as_deref(),
                params.get("labelSelector").map(String::as_str),
                params.get("fieldSelector").map(String::as_str),
            ) {
                Ok(items) => items.iter().map(|o| line("ADDED", o)).collect(),
                Err(err) => return error(err),
            },
        };
        (initial, receiver, after)
    };
    let target = Target {
        resource: target.resource,
        namespace: target.namespace.clone(),
        name: None,
        status: false,
        eviction: false,
        token_request: false,
        approval: false,
    };
    let params = params.clone();
    let live = BroadcastStream::new(receiver).filter_map(move |event| {
        let out = match event {
            Ok(event) if event.rv > after && matches(&event, resource, &target, &params) => {
                Some(line(event.kind, &event.object))
            }
            _ => None,
        };
        async move { out }
    });
    let stream = futures_util::stream::iter(initial)
        .chain(live)
        .take_until(tokio::time::sleep(timeout));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .expect("response")
}
