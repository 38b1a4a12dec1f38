"""Replacing subgraphs of an aten graph by kernels: the provider protocol (providers), the
rewrite of a graph (graph), the opaque launch op (launch), a kernel traced into the graph for
Inductor to launch (inline), the shape dispatcher of symbolic subgraphs (dispatch); and the
compiled graph called under a condition: while the input values it relied on hold (guarded),
or while its kernels make it faster than the fallback's own graph (judged).

Must not: decide which kernel (tuner/ does), search, or compile kernels.
"""
