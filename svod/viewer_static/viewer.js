// svod's layer over egglog's e-graph visualizer (egraph-visualizer, shipped with egglog).
// The visualizer draws the e-graph (React Flow + ELK) and steps through saturation with
// its slider; this module adds the side panel: the chosen plan (kernels -> ops and source
// lines, "focus" on one kernel's region), the e-class under the last click with its
// alternatives, their variants' kernels and prices, why-not-fused boundaries, the
// variants, and the outlines of the chosen plan. Data: the JSON of svod/viewer.py.
//
// Page:     mountViewer(element, {title, graphs: [view, ...]}, visualizerModule)
// Notebook: the anywidget entry `render({model, el})` (model: data, viz_js).

const RED = "#d62728", BLUE = "#1f77b4";

function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined) el.setAttribute(k, v);
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

function us(x) {
  if (x === null || x === undefined) return "?";
  return x >= 1000 ? `${(x / 1000).toFixed(3)} ms` : `${x.toFixed(2)} µs`;
}

function cssIds(prefix, ids) {
  return ids.map((id) => `.svod-viewer .react-flow__node[data-id="${prefix}${CSS.escape(id)}"] > div`).join(",\n");
}

export function mountViewer(root, data, viz) {
  root.classList.add("svod-viewer");
  root.innerHTML = "";
  const graphs = data.graphs || [data];
  const style = h("style", { id: "svod-highlight" });
  const select = h("select", { id: "svod-graph", class: "svod-select" },
    graphs.map((g, i) => h("option", { value: i }, g.title || `graph ${i}`)));
  const status = h("span", { id: "svod-status", class: "svod-status" });
  const showAll = h("button", { id: "svod-show-all", class: "svod-btn", hidden: "" }, "show all");
  const header = h("div", { class: "svod-header" },
    h("b", {}, data.title || "svod e-graph viewer"), graphs.length > 1 ? select : null, status, showAll,
    h("span", { class: "svod-legend" },
      h("span", { class: "svod-swatch", style: `border-color:${RED}` }), "chosen plan ",
      h("span", { class: "svod-swatch", style: `border-color:${BLUE}` }), "selected"));
  const canvas = h("div", { id: "svod-egraph", class: "svod-egraph" });
  const panel = h("div", { id: "svod-panel", class: "svod-panel" });
  root.append(style, header, h("div", { class: "svod-body" }, canvas, panel));
  const mounted = viz.mount(canvas);
  const state = { g: null, selected: [], selectedNodes: [] };

  function paint() {
    const g = state.g;
    const rules = [];
    if (g.chosen_classes.length) rules.push(`${cssIds("class-", g.chosen_classes)} { box-shadow: 0 0 0 3px ${RED}; }`);
    if (g.chosen_enodes.length) rules.push(`${cssIds("node-", g.chosen_enodes)} { box-shadow: 0 0 0 2px ${RED}; }`);
    if (state.selected.length) rules.push(`${cssIds("class-", state.selected)} { box-shadow: 0 0 0 4px ${BLUE}; }`);
    if (state.selectedNodes.length) rules.push(`${cssIds("node-", state.selectedNodes)} { box-shadow: 0 0 0 3px ${BLUE}; }`);
    style.textContent = rules.join("\n");
    root.dataset.selected = state.selected.join(" ");
  }

  function select_(classes, enodes = []) {
    state.selected = classes.filter((c) => state.g.classes[c]);
    state.selectedNodes = enodes;
    paint();
  }

  function classesOf(nodes) {
    const out = [];
    for (const i of nodes) for (const p of ["T", "F", "L"]) if (state.g.classes[`${p}${i}`]) out.push(`${p}${i}`);
    return out;
  }

  function render(snapshots) {
    mounted.render(snapshots);
    const n = snapshots.length, sizes = state.g.iterations || [];
    status.textContent = `${n} snapshot(s): after encoding, then ${n - 1} saturation iteration(s) ` +
      `(${state.g.stop_reason}); e-nodes per iteration ${sizes.join(", ") || "-"}`;
  }

  function focus(kernel) {
    const g = state.g;
    const keep = new Set(classesOf(kernel.nodes));
    for (const i of kernel.nodes) for (const s of g.nodes[i].src || []) for (const c of classesOf([s])) keep.add(c);
    const snaps = g.snapshots.map((text) => {
      const js = JSON.parse(text);
      const nodes = {};
      for (const [id, n] of Object.entries(js.nodes)) {
        if (keep.has(n.eclass)) nodes[id] = { ...n, children: n.children.filter((c) => js.nodes[c] && keep.has(js.nodes[c].eclass)) };
      }
      const cd = {};
      for (const c of Object.keys(js.class_data)) if (keep.has(c)) cd[c] = js.class_data[c];
      return JSON.stringify({ ...js, nodes, class_data: cd });
    });
    render(snaps);
    showAll.hidden = false;
    status.textContent = `focus on kernel ${kernel.name}: ${keep.size} e-class(es) — ` + status.textContent;
  }

  showAll.addEventListener("click", () => { showAll.hidden = true; render(state.g.snapshots); });

  function section(title, id, ...body) {
    return h("details", { open: "", id }, h("summary", {}, title), ...body);
  }

  function sourceLine(i) {
    const s = state.g.nodes[i].source;
    return s ? h("span", { class: "svod-src" }, s) : null;
  }

  function kernelRow(k, idx) {
    const ops = h("ul", { class: "svod-ops", hidden: "" },
      k.nodes.map((i) => h("li", { "data-node": i }, h("code", {}, `%${i} ${state.g.nodes[i].label}`), " ", sourceLine(i))));
    const row = h("li", { class: "svod-kernel", "data-kernel": k.name },
      h("div", { class: "svod-row", onclick: () => { select_(classesOf(k.nodes)); ops.hidden = !ops.hidden; } },
        h("code", {}, k.name), ` ${k.kind}`, k.passes > 1 ? ` (${k.passes} passes)` : "",
        h("span", { class: "svod-price" }, `${us(k.us)}${k.threads > 1 ? ` on ${k.threads} threads` : ""}`),
        h("div", { class: "svod-ops-line" }, k.ops)),
      h("button", { class: "svod-btn svod-focus", onclick: (ev) => { ev.stopPropagation(); focus(k); } }, "focus"),
      ops);
    return row;
  }

  function showClass(name, enode = null) {
    const g = state.g, c = g.classes[name];
    const box = panel.querySelector("#svod-class");
    box.dataset.class = name;
    box.innerHTML = "";
    box.append(h("summary", {}, `e-class ${name}`));
    if (!c) { box.append(h("p", {}, "not in this e-graph")); return; }
    const what = { T: "the value in memory (a kernel writes it, or an input)", F: "the value as an in-kernel expression",
      L: "a load of the value from memory (a kernel boundary)" }[c.sort];
    box.append(h("p", {}, h("b", {}, c.label), ` — ${what}`, c.node !== null ? h("br") : null,
      c.node !== null ? sourceLine(c.node) : null));
    const list = h("ol", { class: "svod-alts" });
    for (const a of c.alternatives) {
      const chosen = a.variants.includes(0);
      const used = a.variants.length ? `used by variant(s) ${a.variants.map((v) => `#${v}`).join(", ")}`
        : "used by none of the kept variants";
      list.append(h("li", { class: `svod-alt${chosen ? " svod-chosen" : ""}${a.enode === enode ? " svod-picked" : ""}`,
        "data-enode": a.enode },
        h("code", {}, a.label), chosen ? h("span", { class: "svod-badge" }, "chosen") : null, h("br"),
        h("span", { class: "svod-muted" }, used),
        h("ul", {}, a.kernels.map((k) => h("li", {},
          `#${k.variant}: kernel `, h("code", {}, k.kernel), ` ${k.kind} [${k.ops}] ${us(k.us)}; plan ${us(k.plan_us)}`)))));
    }
    box.append(list);
    box.open = true;
    select_([name], enode ? [enode] : []);
  }

  function showGraph(i) {
    const g = graphs[i];
    state.g = g;
    panel.innerHTML = "";
    const enodeClass = {};
    for (const [name, c] of Object.entries(g.classes)) for (const a of c.alternatives) enodeClass[a.enode] = name;
    state.enodeClass = enodeClass;
    const total = g.kernels.reduce((s, k) => s + (k.us || 0), 0);
    panel.append(
      section(`Chosen plan: ${g.kernels.length} kernel(s), ${us(total)} predicted (${g.cost_model})`, "svod-plan",
        h("ol", { class: "svod-kernels" }, g.kernels.map(kernelRow))),
      h("details", { id: "svod-class", open: "" }, h("summary", {}, "e-class"),
        h("p", { class: "svod-muted" }, "Click an e-class (or an e-node) in the e-graph to see its alternatives.")),
      section(`Why not fused: ${g.boundaries.length} boundar${g.boundaries.length === 1 ? "y" : "ies"}`, "svod-boundaries",
        g.boundaries.length ? h("ul", {}, g.boundaries.map((b) => h("li", {
          class: "svod-boundary", onclick: () => select_(classesOf([b.producer, b.consumer])) },
          h("code", {}, b.label), h("br"), h("b", {}, b.reason), `: ${b.detail}`)))
          : h("p", {}, g.boundary_error || "every computed value is fused: no boundary between two computed values")),
      section(`Variants: ${g.variants.length}`, "svod-variants",
        h("ol", { start: 0 }, g.variants.map((v) => h("li", { class: "svod-variant",
          onclick: () => select_(v.materialized.map((i) => `T${i}`)) },
          `${v.kernels.length} kernel(s), ${us(v.us)}: `, h("span", {}, v.difference), h("br"),
          h("code", { class: "svod-muted" }, v.describe))))),
      section("Search report", "svod-report", h("pre", {}, g.report)));
    state.selected = [];
    state.selectedNodes = [];
    paint();
    if (g.snapshots.length) render(g.snapshots);
    else { canvas.innerHTML = ""; canvas.append(h("p", { class: "svod-muted" }, "no e-graph: " + g.stop_reason)); }
  }

  canvas.addEventListener("click", (ev) => {
    const el = ev.target.closest && ev.target.closest(".react-flow__node");
    if (!el) return;
    const id = el.getAttribute("data-id") || "";
    if (id.startsWith("class-")) showClass(id.slice(6));
    else if (id.startsWith("node-")) showClass(state.enodeClass[id.slice(5)], id.slice(5));
  }, true);
  select.addEventListener("change", () => showGraph(Number(select.value)));
  showGraph(0);
  root.svod = { showClass, showGraph, focus: (name) => focus(state.g.kernels.find((k) => k.name === name)) };
  return root.svod;
}

// anywidget entry point (svod.viewer_serve.Widget): the visualizer's code arrives as text
// and is imported from a blob URL, so the widget needs no server and no network.
export async function render({ model, el }) {
  const url = URL.createObjectURL(new Blob([model.get("viz_js")], { type: "text/javascript" }));
  const viz = await import(url);
  const box = document.createElement("div");
  box.style.height = model.get("height") || "720px";
  el.append(box);
  mountViewer(box, JSON.parse(model.get("data")), viz);
}

export default { render };
