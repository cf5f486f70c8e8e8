"""/docs served from the swagger-ui-py package's assets, so the API's documentation works offline."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

router = APIRouter(include_in_schema=False)


@router.get("/docs")
def docs() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="Attention Lab API",
        swagger_js_url="/vendor/swagger/swagger-ui-bundle.js",
        swagger_css_url="/vendor/swagger/swagger-ui.css",
        swagger_favicon_url="/vendor/swagger/favicon-32x32.png",
    )
