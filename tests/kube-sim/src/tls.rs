//! HTTPS for a simulated API, as a real apiserver serves it: every simulator
//! makes a CA of its own at start and a serving certificate signed by it for
//! `127.0.0.1`, `localhost` and the names it is given. Clients pin the CA (it
//! goes into the kubeconfig as `certificate-authority-data`); `kubectl` sends
//! a bearer token only over TLS, so plain HTTP would hide what users see.
//!
//! Client certificates authenticate as kube-apiserver's `--client-ca-file`
//! makes them (kubernetes.io, "Authenticating": X509 client certificates):
//! one signed by the cluster's CA is the user its subject's common name
//! names, in the groups its organizations name (a kubelet's:
//! `CN=system:node:<name>, O=system:nodes`), plus `system:authenticated`.
//! The handshake asks for one and takes connections without; a certificate
//! the CA did not sign ends the handshake.

use std::sync::Arc;

use axum::Router;
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

/// A simulator's certificate authority and the acceptor serving its certificate.
pub(crate) struct Authority {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
    common_name: String,
    /// The names the serving certificate carries besides loopback's.
    names: std::sync::Mutex<Vec<String>>,
    /// What new connections are answered with: replaced when the serving
    /// certificate is issued again.
    pub acceptor: Arc<std::sync::RwLock<TlsAcceptor>>,
}

fn invalid(err: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, err.to_string())
}

impl Authority {
    /// A new CA and a serving certificate for loopback and `names`.
    pub fn new(common_name: &str, names: &[String]) -> std::io::Result<Self> {
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(invalid)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, format!("{common_name}-ca"));
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(invalid)?)
            .map_err(invalid)?;
        let acceptor = serving(&issuer, common_name, names)?;
        Ok(Self {
            ca_pem: issuer.pem(),
            issuer,
            common_name: common_name.to_string(),
            names: std::sync::Mutex::new(names.to_vec()),
            acceptor: Arc::new(std::sync::RwLock::new(acceptor)),
        })
    }

    /// A client certificate from this CA for `user` in `groups`, and its
    /// key, both PEM: what a kubelet keeps in `/var/lib/kubelet/pki` once
    /// its request is approved and signed.
    pub fn client_certificate(
        &self,
        user: &str,
        groups: &[&str],
    ) -> std::io::Result<(String, String)> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(invalid)?;
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().map_err(invalid)?;
        let certificate = params.signed_by(&key, &self.issuer).map_err(invalid)?;
        Ok((certificate.pem(), key.serialize_pem()))
    }

    /// Signs a kubelet's client certificate request (DER) as
    /// kube-controller-manager's `kubernetes.io/kube-apiserver-client-kubelet`
    /// signer does: the request's subject and key, client auth, from this
    /// CA. A request whose signature does not verify, or whose key is not
    /// ECDSA P-256 (what kubelets generate), is refused.
    pub fn sign_request(&self, request_der: &[u8]) -> std::io::Result<String> {
        use x509_parser::prelude::FromDer;
        let (_, request) =
            x509_parser::certification_request::X509CertificationRequest::from_der(request_der)
                .map_err(invalid)?;
        request.verify_signature().map_err(invalid)?;
        let info = &request.certification_request_info;
        let key = RequestKey::of(&info.subject_pki)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(invalid)?;
        for name in info.subject.iter_common_name() {
            params
                .distinguished_name
                .push(DnType::CommonName, name.as_str().map_err(invalid)?);
        }
        for organization in info.subject.iter_organization() {
            params.distinguished_name.push(
                DnType::OrganizationName,
                organization.as_str().map_err(invalid)?,
            );
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let certificate = params.signed_by(&key, &self.issuer).map_err(invalid)?;
        Ok(certificate.pem())
    }

    /// Serves a certificate for `names` from the same CA from now on, when
    /// they differ from the current ones: a control plane restarted with
    /// other names (a vCluster chart's `controlPlane.proxy.extraSANs`
    /// changed) keeps its CA, so clients that pinned it trust the new one.
    pub fn reissue(&self, names: &[String]) -> std::io::Result<()> {
        let mut current = self.names.lock().expect("lock");
        if current.as_slice() == names {
            return Ok(());
        }
        let acceptor = serving(&self.issuer, &self.common_name, names)?;
        *self.acceptor.write().expect("lock") = acceptor;
        *current = names.to_vec();
        Ok(())
    }
}

/// The public key of a certificate request.
struct RequestKey(Vec<u8>);

impl RequestKey {
    fn of(spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>) -> std::io::Result<Self> {
        use x509_parser::oid_registry::{OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY};
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok());
        if spki.algorithm.algorithm != OID_KEY_TYPE_EC_PUBLIC_KEY || curve != Some(OID_EC_P256) {
            return Err(invalid("only ECDSA P-256 keys are signed"));
        }
        Ok(Self(spki.subject_public_key.data.to_vec()))
    }
}

impl rcgen::PublicKeyData for RequestKey {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

/// A serving certificate signed by `issuer` for `127.0.0.1`, `localhost`
/// (vCluster adds both to its certificate: loft-sh/vcluster#1333) and `names`.
fn serving(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    common_name: &str,
    names: &[String],
) -> std::io::Result<TlsAcceptor> {
    let mut sans = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    sans.extend(names.iter().filter(|n| !n.is_empty()).cloned());
    sans.sort();
    sans.dedup();
    let mut serving = CertificateParams::new(sans).map_err(invalid)?;
    serving
        .distinguished_name
        .push(DnType::CommonName, common_name);
    serving.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().map_err(invalid)?;
    let certificate = serving.signed_by(&key, issuer).map_err(invalid)?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(issuer.der().clone()).map_err(invalid)?;
    let clients = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .map_err(invalid)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(invalid)?
        .with_client_cert_verifier(clients)
        .with_single_cert(
            vec![certificate.der().clone(), issuer.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .map_err(invalid)?;
    // HTTP/1.1 only: watches, exec upgrades and kubectl all work over it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Who a verified client certificate authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientCertificate {
    pub user: String,
    pub groups: Vec<String>,
}

impl ClientCertificate {
    /// The subject's common name and organizations (the handshake has
    /// verified the certificate against the CA).
    fn of(der: &[u8]) -> Option<Self> {
        let (_, certificate) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = certificate.subject();
        let user = subject
            .iter_common_name()
            .next()?
            .as_str()
            .ok()?
            .to_string();
        let mut groups: Vec<String> = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        groups.push("system:authenticated".into());
        Some(Self { user, groups })
    }
}

/// Serves `app` over TLS on `listener` until the task is aborted.
pub(crate) async fn serve(
    listener: TcpListener,
    acceptor: Arc<std::sync::RwLock<TlsAcceptor>>,
    app: Router,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            // Out of file descriptors, say: wait rather than spin.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let (acceptor, app) = (acceptor.read().expect("lock").clone(), app.clone());
        tokio::spawn(async move {
            // A client that does not trust the CA hangs up here; nothing to serve.
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let client = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|certificate| ClientCertificate::of(certificate.as_ref()));
            let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
                if let Some(client) = &client {
                    request.extensions_mut().insert(client.clone());
                }
                app.clone().oneshot(request)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

/// HTTPS in front of a plain-HTTP server, as the platform's ingress or API
/// gateway terminates TLS for it: a CA of its own, a certificate for
/// loopback, and every connection relayed to `upstream` byte for byte.
/// Stops when dropped.
pub struct TlsFront {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The PEM of the CA the certificate is signed by.
    pub ca_pem: String,
    task: tokio::task::AbortHandle,
}

impl TlsFront {
    pub async fn start(upstream: std::net::SocketAddr) -> std::io::Result<Self> {
        let authority = Authority::new("kube-sim-tls-front", &[])?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("https://{}", listener.local_addr()?);
        let acceptor = authority.acceptor.read().expect("lock").clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        })
        .abort_handle();
        Ok(Self {
            url,
            ca_pem: authority.ca_pem,
            task,
        })
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}
