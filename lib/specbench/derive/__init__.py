"""Derivations from stored runs, computed one way for whoever needs them: the measurement
writes its tables with them, the report formats and glues them. A sweep's tidy tables from its
parts (``sweep_tables``); the store's cells with every model's and rival's prediction
(``analysis``, memoised per store content); the models' errors (``evaluation``); transfer across
SKUs and its three tiers (``transfer``, ``tiers``, ``step_cost``); sealed predictions and their
verdicts (``sealed``); step records and their fits (``steps``, ``step_fits``, ``serving_steps``,
``engine_agreement``); draft cells (``drafts``); the host floor's differencing of two profiles
(``decompose``), the counter reads' overhead (``overhead``) and how noisy the host was
(``noise``). Functions over records and tables: no engine, no probe, no figure, no glue."""
