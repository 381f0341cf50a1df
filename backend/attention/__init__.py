"""The attention kernel kind: QK^T -> row softmax -> PV in one flash-style kernel (templates/polysat_attention.cuh).

Regions are recognised by :func:`.bind.bind`; P must be rounded to the inputs' type (the PV MMA takes P and
V in one type).

A bound region also fixes the softmax algorithm: its ``online_softmax_sum`` makes one walk over the keys
(P rounded at the running max: ``online_softmax``) or two (P rounded after the division by the row sum:
``streaming_softmax_2pass``), and the kernel must round P where the region does: the spec carries the
region's ``passes`` and the kind's search ranks only that algorithm; a spec with ``passes=None`` (made
directly, not from a region) gets both algorithms, online first.
"""
