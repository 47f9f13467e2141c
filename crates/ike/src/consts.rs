//! IANA numbers of IKEv2 (RFC 7296 §3 and the IKEv2 parameters registry) that nfx uses.

/// Exchange types (RFC 7296 §3.1).
pub mod exchange {
    /// IKE_SA_INIT.
    pub const IKE_SA_INIT: u8 = 34;
    /// IKE_AUTH.
    pub const IKE_AUTH: u8 = 35;
    /// CREATE_CHILD_SA.
    pub const CREATE_CHILD_SA: u8 = 36;
    /// INFORMATIONAL.
    pub const INFORMATIONAL: u8 = 37;
}

/// Header flags (RFC 7296 §3.1).
pub mod flags {
    /// Set in messages sent by the original initiator of the IKE SA.
    pub const INITIATOR: u8 = 0x08;
    /// The sender can speak a higher major version.
    pub const VERSION: u8 = 0x10;
    /// The message is a response.
    pub const RESPONSE: u8 = 0x20;
}

/// Payload types (RFC 7296 §3.2).
pub mod payload {
    /// No next payload.
    pub const NONE: u8 = 0;
    /// Security Association.
    pub const SA: u8 = 33;
    /// Key Exchange.
    pub const KE: u8 = 34;
    /// Identification - Initiator.
    pub const IDI: u8 = 35;
    /// Identification - Responder.
    pub const IDR: u8 = 36;
    /// Certificate.
    pub const CERT: u8 = 37;
    /// Certificate Request.
    pub const CERTREQ: u8 = 38;
    /// Authentication.
    pub const AUTH: u8 = 39;
    /// Nonce.
    pub const NONCE: u8 = 40;
    /// Notify.
    pub const NOTIFY: u8 = 41;
    /// Delete.
    pub const DELETE: u8 = 42;
    /// Vendor ID.
    pub const VENDOR: u8 = 43;
    /// Traffic Selector - Initiator.
    pub const TSI: u8 = 44;
    /// Traffic Selector - Responder.
    pub const TSR: u8 = 45;
    /// Encrypted and Authenticated.
    pub const SK: u8 = 46;
    /// Configuration.
    pub const CP: u8 = 47;
    /// Extensible Authentication.
    pub const EAP: u8 = 48;
}

/// Security protocol identifiers (proposals, notify, delete).
pub mod proto {
    /// IKE.
    pub const IKE: u8 = 1;
    /// AH.
    pub const AH: u8 = 2;
    /// ESP.
    pub const ESP: u8 = 3;
}

/// Transform types (RFC 7296 §3.3.2).
pub mod transform {
    /// Encryption algorithm.
    pub const ENCR: u8 = 1;
    /// Pseudorandom function.
    pub const PRF: u8 = 2;
    /// Integrity algorithm.
    pub const INTEG: u8 = 3;
    /// Diffie-Hellman group.
    pub const DH: u8 = 4;
    /// Extended sequence numbers.
    pub const ESN: u8 = 5;
}

/// Transform IDs nfx implements.
pub mod id {
    /// ENCR_AES_CBC (RFC 3602).
    pub const ENCR_AES_CBC: u16 = 12;
    /// ENCR_AES_CTR (RFC 3686).
    pub const ENCR_AES_CTR: u16 = 13;
    /// ENCR_AES_GCM_16 (RFC 4106 / RFC 5282).
    pub const ENCR_AES_GCM_16: u16 = 20;
    /// ENCR_CHACHA20_POLY1305 (RFC 7634).
    pub const ENCR_CHACHA20_POLY1305: u16 = 28;
    /// PRF_HMAC_SHA2_256 (RFC 4868).
    pub const PRF_HMAC_SHA2_256: u16 = 5;
    /// AUTH_HMAC_SHA2_256_128 (RFC 4868).
    pub const AUTH_HMAC_SHA2_256_128: u16 = 12;
    /// 256-bit random ECP group (RFC 5903).
    pub const DH_ECP256: u16 = 19;
    /// Curve25519 (RFC 8031).
    pub const DH_CURVE25519: u16 = 31;
    /// No extended sequence numbers.
    pub const ESN_NO: u16 = 0;
    /// Extended sequence numbers.
    pub const ESN_YES: u16 = 1;
}

/// Transform attribute types.
pub mod attr {
    /// Key Length (in bits), TV format.
    pub const KEY_LENGTH: u16 = 14;
}

/// Identification types (RFC 7296 §3.5).
pub mod idtype {
    /// A single IPv4 address.
    pub const IPV4_ADDR: u8 = 1;
    /// A fully-qualified domain name.
    pub const FQDN: u8 = 2;
    /// An RFC 822 e-mail address.
    pub const RFC822_ADDR: u8 = 3;
    /// A single IPv6 address.
    pub const IPV6_ADDR: u8 = 5;
    /// A DER-encoded ASN.1 X.500 distinguished name.
    pub const DER_ASN1_DN: u8 = 9;
    /// An opaque key identifier.
    pub const KEY_ID: u8 = 11;
}

/// Authentication methods (RFC 7296 §3.8, RFC 4754, RFC 7427).
pub mod auth {
    /// Shared Key Message Integrity Code.
    pub const PSK: u8 = 2;
    /// ECDSA with SHA-256 on the P-256 curve (RFC 4754).
    pub const ECDSA_P256_SHA256: u8 = 9;
    /// Digital Signature (RFC 7427).
    pub const DIGITAL_SIGNATURE: u8 = 14;
}

/// Certificate encodings (RFC 7296 §3.6).
pub mod cert {
    /// X.509 Certificate - Signature (DER).
    pub const X509_SIGNATURE: u8 = 4;
}

/// Hash algorithm identifiers of SIGNATURE_HASH_ALGORITHMS (RFC 7427).
pub mod hash {
    /// SHA2-256.
    pub const SHA2_256: u16 = 2;
}

/// Notify message types (RFC 7296 §3.10.1 and later RFCs).
pub mod notify {
    /// UNSUPPORTED_CRITICAL_PAYLOAD.
    pub const UNSUPPORTED_CRITICAL_PAYLOAD: u16 = 1;
    /// INVALID_IKE_SPI.
    pub const INVALID_IKE_SPI: u16 = 4;
    /// INVALID_MAJOR_VERSION.
    pub const INVALID_MAJOR_VERSION: u16 = 5;
    /// INVALID_SYNTAX.
    pub const INVALID_SYNTAX: u16 = 7;
    /// INVALID_MESSAGE_ID.
    pub const INVALID_MESSAGE_ID: u16 = 9;
    /// INVALID_SPI.
    pub const INVALID_SPI: u16 = 11;
    /// NO_PROPOSAL_CHOSEN.
    pub const NO_PROPOSAL_CHOSEN: u16 = 14;
    /// INVALID_KE_PAYLOAD.
    pub const INVALID_KE_PAYLOAD: u16 = 17;
    /// AUTHENTICATION_FAILED.
    pub const AUTHENTICATION_FAILED: u16 = 24;
    /// SINGLE_PAIR_REQUIRED.
    pub const SINGLE_PAIR_REQUIRED: u16 = 34;
    /// NO_ADDITIONAL_SAS.
    pub const NO_ADDITIONAL_SAS: u16 = 35;
    /// INTERNAL_ADDRESS_FAILURE.
    pub const INTERNAL_ADDRESS_FAILURE: u16 = 36;
    /// FAILED_CP_REQUIRED.
    pub const FAILED_CP_REQUIRED: u16 = 37;
    /// TS_UNACCEPTABLE.
    pub const TS_UNACCEPTABLE: u16 = 38;
    /// INVALID_SELECTORS.
    pub const INVALID_SELECTORS: u16 = 39;
    /// TEMPORARY_FAILURE (RFC 7296 §2.25).
    pub const TEMPORARY_FAILURE: u16 = 43;
    /// CHILD_SA_NOT_FOUND (RFC 7296 §2.25).
    pub const CHILD_SA_NOT_FOUND: u16 = 44;
    /// Status types start here; anything below is an error type.
    pub const FIRST_STATUS: u16 = 16384;
    /// INITIAL_CONTACT.
    pub const INITIAL_CONTACT: u16 = 16384;
    /// SET_WINDOW_SIZE.
    pub const SET_WINDOW_SIZE: u16 = 16385;
    /// NAT_DETECTION_SOURCE_IP.
    pub const NAT_DETECTION_SOURCE_IP: u16 = 16388;
    /// NAT_DETECTION_DESTINATION_IP.
    pub const NAT_DETECTION_DESTINATION_IP: u16 = 16389;
    /// COOKIE.
    pub const COOKIE: u16 = 16390;
    /// USE_TRANSPORT_MODE.
    pub const USE_TRANSPORT_MODE: u16 = 16391;
    /// REKEY_SA.
    pub const REKEY_SA: u16 = 16393;
    /// ESP_TFC_PADDING_NOT_SUPPORTED.
    pub const ESP_TFC_PADDING_NOT_SUPPORTED: u16 = 16394;
    /// SIGNATURE_HASH_ALGORITHMS (RFC 7427).
    pub const SIGNATURE_HASH_ALGORITHMS: u16 = 16431;
}
