"""Speculative decoding engine: draft proposes, target verifies (see `osd.spec.decoder`)."""

from osd.spec.decoder import SpecOutput, SpeculativeDecoder
from osd.spec.evaluate import AcceptanceStats, measure_acceptance

__all__ = ["AcceptanceStats", "SpecOutput", "SpeculativeDecoder", "measure_acceptance"]
