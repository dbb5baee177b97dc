"""osd: Online Speculative Decoding (Liu et al., arXiv 2310.07177), reproduced."""

__version__ = "0.1.0"
