"""A certificate a slot serves, as ``status`` shows it: its names, issuer and expiry, read
from what the proxy keeps (never its key)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from shipway.spec.model import Target


@dataclass(frozen=True)
class CertificateStatus:
    """``source``: ``acme`` (ordered and renewed by the proxy of ``host``) or ``secrets``;
    ``host``: where it is kept; ``served_by``: every host that serves it."""

    names: tuple[str, ...]
    issuer: str
    expires: datetime.datetime
    serial: str
    source: str
    host: str
    served_by: tuple[str, ...] = ()

    def line(self) -> str:
        left = self.expires - datetime.datetime.now(datetime.UTC)
        days = f"{left.days} days left" if left.days >= 1 else f"{int(left.total_seconds())}s left"
        served = f", served by {', '.join(self.served_by)}" if self.served_by else ""
        return (
            f"{', '.join(self.names)}: issued by {self.issuer}, expires "
            f"{self.expires:%Y-%m-%d %H:%M:%S} UTC ({days}), from {self.source} on "
            f"{self.host}{served}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "names": list(self.names),
            "issuer": self.issuer,
            "expires": self.expires.isoformat(),
            "serial": self.serial,
            "source": self.source,
            "host": self.host,
            "served_by": list(self.served_by),
        }


@runtime_checkable
class ServesCertificates(Protocol):
    def certificates(self, target: Target) -> list[CertificateStatus]: ...


def of_pem(pem: bytes, source: str, host: str, served_by: tuple[str, ...]) -> CertificateStatus:
    """The first certificate of a PEM chain, as status shows it."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = x509.load_pem_x509_certificates(pem)[0]
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        names = tuple(san.value.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        names = ()
    issuer = cert.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)
    return CertificateStatus(
        names=names,
        issuer=str(issuer[0].value) if issuer else cert.issuer.rfc4514_string(),
        expires=cert.not_valid_after_utc,
        serial=format(cert.serial_number, "x"),
        source=source,
        host=host,
        served_by=served_by,
    )
