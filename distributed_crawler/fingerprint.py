"""Public path kept for existing projects (README); the code lives in `distributed_crawler.dedup.fingerprint`."""

from distributed_crawler.dedup.fingerprint import CanonicalFingerprinter

__all__ = ["CanonicalFingerprinter"]
