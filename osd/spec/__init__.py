"""Speculative decoding engine: draft proposes, target verifies (see `osd.spec.decoder`)."""

from osd.spec.adaptive import GammaPolicy
from osd.spec.decoder import SpeculativeDecoder
from osd.spec.evaluate import AcceptanceStats, measure_acceptance
from osd.spec.records import SpecOutput

__all__ = ["AcceptanceStats", "GammaPolicy", "SpecOutput", "SpeculativeDecoder", "measure_acceptance"]
