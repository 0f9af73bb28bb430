"""Disaster recovery: the offset syncs the worker writes and the translation of a consumer group's offsets
to the destination (`offset_syncs`, `offset_translation`); where a failed-over group resumes, from the
provenance headers (`resume_search`, `resume_index`); group offset sync (`group_rules`: pure plan,
`group_admin`: admin edge); topic ACL sync (`acl_rules`, `acl_admin`); the failover mark
(`failover_mark`); failback (`failback`, `failback_translation`); the name filters they share
(`name_filter`).
"""
