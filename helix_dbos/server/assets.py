"""GET /assets/{name}: the inbox's scripts and styles, and the API docs' Swagger UI and
ReDoc from the `fastapi-offline` package, so every page works without internet and the
Content-Security-Policy can allow scripts of this origin only.

Public (no token): the sign-in form needs them, and they hold nothing secret.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter, HTTPException
from fastapi.responses import HTMLResponse, Response

# name -> (package, path inside it, media type)
ASSETS: dict[str, tuple[str, str, str]] = {
    "page_kit.js": ("helix_dbos.server", "page_kit.js", "text/javascript"),
    "inbox.js": ("helix_dbos.server", "inbox.js", "text/javascript"),
    "inbox.css": ("helix_dbos.server", "inbox.css", "text/css"),
    "timeline.js": ("helix_dbos.server", "timeline.js", "text/javascript"),
    "timeline.css": ("helix_dbos.server", "timeline.css", "text/css"),
    "sign_in.js": ("helix_dbos.server", "sign_in.js", "text/javascript"),
    "sign_in.css": ("helix_dbos.server", "sign_in.css", "text/css"),
    "swagger-init.js": ("helix_dbos.server", "swagger_init.js", "text/javascript"),
    "swagger-ui-bundle.js": ("fastapi_offline", "static/swagger-ui-bundle.js", "text/javascript"),
    "swagger-ui.css": ("fastapi_offline", "static/swagger-ui.css", "text/css"),
    "redoc.standalone.js": ("fastapi_offline", "static/redoc.standalone.js", "text/javascript"),
    "favicon.png": ("fastapi_offline", "static/favicon.png", "image/png"),
}

SWAGGER_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}: API docs</title>
<link rel="stylesheet" href="assets/swagger-ui.css">
<link rel="icon" href="assets/favicon.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="assets/swagger-ui-bundle.js"></script>
<script src="assets/swagger-init.js"></script>
</body>
</html>
"""

REDOC_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}: API reference</title>
<link rel="icon" href="assets/favicon.png">
</head>
<body>
<redoc spec-url="openapi.json"></redoc>
<script src="assets/redoc.standalone.js"></script>
</body>
</html>
"""


@cache
def asset(name: str) -> bytes:
    package, path, _ = ASSETS[name]
    return resources.files(package).joinpath(path).read_bytes()


def build_router(title: str, *, api_docs: bool) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/assets/{name}")
    async def get_asset(name: str) -> Response:
        if name not in ASSETS:
            raise HTTPException(status_code=404, detail=f"No asset '{name}'")
        return Response(
            asset(name),
            media_type=ASSETS[name][2],
            headers={"Cache-Control": "public, max-age=3600"},
        )

    if api_docs:
        safe_title = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

        @router.get("/docs")
        async def swagger() -> HTMLResponse:
            return HTMLResponse(SWAGGER_PAGE.format(title=safe_title))

        @router.get("/redoc")
        async def redoc() -> HTMLResponse:
            return HTMLResponse(REDOC_PAGE.format(title=safe_title))

    return router
