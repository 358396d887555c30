//! The control plane's certificates and keys, made with rcgen (ECDSA P-256) into one directory:
//! a CA, the API server's serving certificate, the service-account signing key, and client
//! certificates on demand (the API server maps CN to the user name and O to groups).
use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

pub struct Pki {
    dir: PathBuf,
    ca: Issuer<'static, KeyPair>,
}

/// A client certificate and its key, as files.
#[derive(Clone, Debug)]
pub struct ClientCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    /// Writes ca.crt, apiserver.crt/.key (valid for `serving_names`) and sa.key/.pub into `dir`
    /// (created).
    pub fn generate(dir: &Path, serving_names: &[&str]) -> Result<Pki> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let ca_key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, "highwater-e2e-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca_cert = params.self_signed(&ca_key)?;
        let pki = Pki { dir: dir.to_path_buf(), ca: Issuer::new(params, ca_key) };
        pki.write("ca.crt", &ca_cert.pem())?;

        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(serving_names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        params.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        pki.write("apiserver.crt", &params.signed_by(&key, &pki.ca)?.pem())?;
        pki.write("apiserver.key", &key.serialize_pem())?;

        let sa = KeyPair::generate()?;
        pki.write("sa.key", &sa.serialize_pem())?;
        pki.write("sa.pub", &sa.public_key_pem())?;
        Ok(pki)
    }

    /// Issues a client certificate for user `user` in `groups`, written as `<file>.crt`/`.key`.
    pub fn client_cert(&self, file: &str, user: &str, groups: &[&str]) -> Result<ClientCert> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params.distinguished_name.push(DnType::OrganizationName, *group);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.ca)?;
        Ok(ClientCert {
            cert: self.write(&format!("{file}.crt"), &cert.pem())?,
            key: self.write(&format!("{file}.key"), &key.serialize_pem())?,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    pub fn serving_cert(&self) -> PathBuf {
        self.dir.join("apiserver.crt")
    }

    pub fn serving_key(&self) -> PathBuf {
        self.dir.join("apiserver.key")
    }

    /// The service-account token signing key (private, PKCS#8 PEM).
    pub fn sa_signing_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }

    /// Its public half, which the API server verifies tokens with.
    pub fn sa_public_key(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }

    fn write(&self, name: &str, pem: &str) -> Result<PathBuf> {
        let path = self.dir.join(name);
        fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}
