"""/docs: Swagger UI from the swagger-ui-py package's assets, started by a static script (no inline JavaScript),
so the API's documentation works offline and under the Content-Security-Policy."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter(include_in_schema=False)

PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Attention Lab API</title>
  <link rel="stylesheet" href="/vendor/swagger/swagger-ui.css">
  <link rel="icon" href="/vendor/swagger/favicon-32x32.png">
</head>
<body>
  <div id="swagger-ui" data-openapi="/openapi.json"></div>
  <script src="/vendor/swagger/swagger-ui-bundle.js"></script>
  <script src="/static/docs.js"></script>
</body>
</html>
"""


@router.get("/docs")
def docs() -> HTMLResponse:
    return HTMLResponse(PAGE)
