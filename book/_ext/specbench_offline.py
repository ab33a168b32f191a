"""Keep the built book free of CDN references.

Jupyter Book 1 always loads sphinx-thebe, which writes its bundle's unpkg.com address into
every page (and registers it twice, a console error). The book has no live-code button, so
the thebe scripts are dropped from each page.
"""


def _drop_thebe(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if scripts is None:
        return
    context["script_files"] = [
        s for s in scripts
        if "THEBE_JS_URL" not in str(getattr(s, "attributes", {}).get("body", ""))
        and "sphinx-thebe" not in str(getattr(s, "filename", s))]


def setup(app):
    app.connect("html-page-context", _drop_thebe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
