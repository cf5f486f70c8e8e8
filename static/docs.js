// Starts Swagger UI on /docs from a file, so the page needs no inline script.
addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({ url: root.dataset.openapi, dom_id: "#swagger-ui", deepLinking: true });
});
