"""osd: Online Speculative Decoding (Liu et al., arXiv 2310.07177), reproduced."""

import os

# torch backs its CPU buffers of 2 MB and more with transparent huge pages, unless the user chose
# otherwise: an online update allocates its dense [V, H] embedding gradients afresh at every step,
# and with 4 KB pages faulting them in took a third of the update (LOG.md, section 38). torch reads
# the variable at its first allocation, so it is set here, before any osd module imports torch.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

__version__ = "0.1.0"
