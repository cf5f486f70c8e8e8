// attention_lab.widget's face (anywidget): the matrix as a grid of coloured cells, one button per head. A click on a
// cell sets `selected` ([query, key]), a click on a head sets `head`: both read back in Python. No imports, no CDN.
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
const RDBU = [[33, 102, 172], [247, 247, 247], [178, 24, 43]];

function ramp(stops, t) {
  const x = Math.min(Math.max(t, 0), 1) * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2);
  const c = stops[i].map((v, k) => Math.round(v + (stops[i + 1][k] - v) * (x - i)));
  return `rgb(${c.join(",")})`;
}

function render({ model, el }) {
  const draw = () => {
    const values = model.get("values"), rows = model.get("rows"), cols = model.get("cols");
    const finite = values.flat().filter((v) => v !== null);
    const bound = Math.max(1e-9, ...finite.map(Math.abs));
    const colour = (v) => v === null ? "#d9d9d9"
      : model.get("scale") === "sequential" ? ramp(VIRIDIS, v) : ramp(RDBU, (v / bound + 1) / 2);
    const [si, sj] = model.get("selected");
    el.replaceChildren();
    const heads = document.createElement("div");
    for (const [h, name] of model.get("head_names").entries()) {
      const b = document.createElement("button");
      b.textContent = name;
      b.disabled = h === model.get("head");
      b.onclick = () => { model.set("head", h); model.save_changes(); };
      heads.append(b);
    }
    const title = document.createElement("div");
    title.textContent = model.get("title");
    const grid = document.createElement("div");
    grid.style.cssText = `display:inline-grid;grid-template-columns:auto repeat(${cols.length},1.6em);gap:1px;font:11px sans-serif`;
    grid.append(document.createElement("span"), ...cols.map((c) => Object.assign(document.createElement("span"),
      { textContent: c, style: "writing-mode:vertical-rl;justify-self:center" })));
    rows.forEach((r, i) => {
      grid.append(Object.assign(document.createElement("span"), { textContent: r, style: "text-align:right;padding-right:4px" }));
      values[i].forEach((v, j) => {
        const cell = document.createElement("span");
        cell.title = `${r} → ${cols[j]}: ${v === null ? "−∞" : v.toFixed(4)}`;
        cell.style.cssText = `height:1.6em;cursor:pointer;background:${colour(v)}` + (i === si && j === sj ? ";outline:2px solid #e66100" : "");
        cell.onclick = () => { model.set("selected", [i, j]); model.save_changes(); };
        grid.append(cell);
      });
    });
    el.append(heads, title, grid);
  };
  draw();
  for (const name of ["values", "selected", "head", "head_names", "title"]) model.on(`change:${name}`, draw);
}

export default { render };
