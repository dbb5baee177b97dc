"""osd: Online Speculative Decoding (Liu et al., arXiv 2310.07177), reproduced.

Importing osd changes no process state. The entry points that train online ask torch for huge pages
themselves (`THP_MEM_ALLOC_ENABLE`, set before torch is imported: `osd.train`, bash_scripts/demo.sh).
"""

__version__ = "0.1.0"
