//! A PostgreSQL server of the tests' own over TLS, as RDS and most managed
//! PostgreSQL serve: a certificate of a private CA, and its TCP connections
//! authenticated by password (SCRAM). The caller starts the server
//! (`local::EmbeddedPostgres`), writes these files into its data directory,
//! then turns `ssl` on and reloads.

use std::{os::unix::fs::MetadataExt, path::Path};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// A CA of its own, as PEM, and the issuer to sign with.
pub fn authority(name: &str) -> (String, CertifiedIssuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    (issuer.pem(), issuer)
}

/// Writes a file PostgreSQL reads, owned as its data directory is.
pub fn write_owned(data_dir: &Path, name: &str, contents: &str) {
    let path = data_dir.join(name);
    std::fs::write(&path, contents).unwrap();
    let owner = std::fs::metadata(data_dir).unwrap();
    std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid())).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
}

/// Makes the server of `data_dir` serve TLS for `localhost` and 127.0.0.1
/// with a certificate of a new CA, and ask every TCP connection for its
/// password (SCRAM-SHA-256; the Unix socket trusts its users). Answers the
/// CA's PEM. Takes effect once `ssl` is on and the configuration reloaded.
pub fn serve_tls_with_passwords(data_dir: &Path) -> String {
    let (ca_pem, ca) = authority("kubebyon-test-instance-ca");
    let key = KeyPair::generate().unwrap();
    let mut serving =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let certificate = serving.signed_by(&key, &ca).unwrap();
    write_owned(data_dir, "server.crt", &certificate.pem());
    write_owned(data_dir, "server.key", &key.serialize_pem());
    write_owned(
        data_dir,
        "pg_hba.conf",
        "local all all trust\n\
         hostssl all all 127.0.0.1/32 scram-sha-256\n\
         hostssl all all ::1/128 scram-sha-256\n",
    );
    ca_pem
}
