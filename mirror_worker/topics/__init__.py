"""Topics: which source topics are mirrored (`filter`), under which names (`naming`) and to which
partition and producer (`routing`), all pure; the admin edge that discovers, creates and grows destination
topics (`admin`); topic-config sync (`configs`: pure planner and admin edge); and
`management.TopicManagement`, the worker's periodic part that runs them with the ACL and group-offset syncs.
"""
