"""Topics, the admin edge: discover source topics and create, grow and describe destination topics (`admin`);
topic-config sync (`configs`: pure planner and admin edge). Which topics are mirrored and under which names is
policy (`mirror_worker.policy`); the worker's periodic pass that runs these is `engine.topic_management`.
"""
