"""The memory browser (`memory-worker ui`, contract section 20): a web application, apart from
the worker, that shows people what their agents remember and lets them correct and remove it,
talking to workers over NATS with the typed client (worker/client.py).

- worker/ui/access.py: who may come in (section 18's tokens, a session cookie, CSRF tokens);
- worker/ui/server.py: the application, its security headers, and how it is served;
- worker/ui/pages.py and worker/ui/agent_pages.py: what each page asks the worker and shows;
- worker/ui/drawing.py: the knowledge graph and the stats chart as server-drawn SVG;
- templates/ (Jinja2, autoescaped: memory text is always text) and static/ (no inline script).
"""
