"""The theory: pure functions, no I/O. Eq. 1 and its rivals (``model``), the headline model
and its ablations (``predict``), the roofline's d(γ) and model shapes (``roofline``), and the
economics worksheet (``economics``). Everything else builds on these; they import nothing of
the package above them."""
