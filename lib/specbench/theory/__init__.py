"""The theory: pure functions, no I/O. Eq. 1 and its rivals (``model``), the headline model
and its ablations (``predict``), the error of a prediction and its MAPE (``errors``), the
roofline's d(γ) and model shapes (``roofline``), the economics worksheet (``economics``), the
spec-decode counters as values with α and the acceptance length defined on them (``counters``)
and the serving SLOs (``slo``). Everything else builds on these; they import nothing of the
package above them."""
