"""Policy, pure and broker-free (what MirrorMaker calls its ReplicationPolicy): which source topics are mirrored
(`filter`), under which destination names and back (`naming`), to which partition and producer (`routing`), and
the provenance header a mirrored record carries (`provenance`). The bottom layer: it imports only
`mirror_worker.exceptions`.
"""
