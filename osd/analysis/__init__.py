"""Draft-model analysis tools after Decoding Speculative Decoding (Yan, Agarwal, Venkataraman):
record a target once (`record`), replay speculative decoding with many drafts without it
(`simulate`), and report tokens matched per iteration, alpha and accepted lengths (`analyze`)."""
