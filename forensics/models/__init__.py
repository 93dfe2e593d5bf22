"""Running and describing networks: the target model (ladder, norm, lm_head), hsf capture's recorder,
the EAGLE-3 draft forward, draft configs and the id -> r conventions of every trainer and engine."""
