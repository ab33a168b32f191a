"""Derivations from a run's stored records, computed one way for whoever needs them: the
measurement writes its tables with them, the report reads stored runs with them. A sweep's tidy
tables from its parts (``sweep_tables``), the host floor's differencing of two profiles
(``decompose``), the counter reads' overhead (``overhead``) and how noisy the host was
(``noise``). Pure functions over records and tables: no engine, no probe, no file written."""
