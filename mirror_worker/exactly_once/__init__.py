"""Exactly-once: a transactional producer per source partition whose positions are committed on the
destination (`transactions`), and those positions' group names, keys, owner metadata and keep-alive under
the offsets retention (`positions`).
"""
