// nfx dashboard: reads the controller's snapshot stream (server-sent events read with
// fetch, so the token goes in the Authorization header and never in a URL) and draws it.
// Every value from the server is put in the page with textContent, never as HTML.
'use strict';

const KEY = 'nfx-token';
const SVG = 'http://www.w3.org/2000/svg';
const HISTORY = 240;
const st = { abort: null, role: 'read', snap: null, accel: new Map(), retry: null };

const $ = (id) => document.getElementById(id);
const token = () => sessionStorage.getItem(KEY) || '';

function el(tag, attrs, ...kids) {
  const e = tag.startsWith('svg:') ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'text') e.textContent = v;
    else if (k === 'on') for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
    else e.setAttribute(k, v);
  }
  for (const c of kids) if (c) e.append(c);
  return e;
}

const fmt = (v, d = 0) => (v === null || v === undefined ? '—' : Number(v).toFixed(d));

function setConn(on, text) {
  const c = $('conn');
  c.textContent = text;
  c.className = 'conn ' + (on ? 'on' : 'off');
}

// ---- login and the stream ----

function showLogin(msg) {
  if (st.abort) st.abort.abort();
  clearTimeout(st.retry);
  $('main').hidden = true;
  $('login').hidden = false;
  $('logout').hidden = true;
  $('login-error').textContent = msg || '';
  setConn(false, 'not connected');
}

function start() {
  $('login').hidden = true;
  $('main').hidden = false;
  $('logout').hidden = false;
  connect();
}

async function connect() {
  const ctl = new AbortController();
  st.abort = ctl;
  try {
    const r = await fetch('/api/v1/dashboard/stream', {
      headers: { Authorization: 'Bearer ' + token() }, signal: ctl.signal, cache: 'no-store',
    });
    if (r.status === 401) {
      sessionStorage.removeItem(KEY);
      showLogin('The controller refused this token.');
      return;
    }
    if (!r.ok) throw new Error('HTTP ' + r.status);
    setConn(true, 'live');
    const rd = r.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await rd.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        onBlock(buf.slice(0, i));
        buf = buf.slice(i + 2);
      }
    }
  } catch (e) {
    if (ctl.signal.aborted) return;
  }
  setConn(false, 'reconnecting');
  st.retry = setTimeout(connect, 1000);
}

function onBlock(block) {
  let name = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith('event:')) name = line.slice(6).trim();
    else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
  }
  if (!data.length) return;
  const v = JSON.parse(data.join('\n'));
  if (name === 'hello') {
    st.role = v.role;
    $('role').textContent = v.role === 'admin' ? 'admin token: may migrate and destroy' : 'read-only token';
  } else if (name === 'snapshot') {
    st.snap = v;
    render(v);
  }
}

// ---- drawing ----

function render(s) {
  $('sample').textContent = 'sample ' + s.seq + ' at ' + new Date(s.at_unix_ms).toLocaleTimeString();
  drawTopology(s);
  drawChains(s);
  drawNodes(s);
  drawAccel(s);
  drawEnergy(s.energy);
  drawOps(s);
}

function hostX(s) {
  const x = new Map();
  s.hosts.forEach((h, i) => x.set(h.id, 70 + i * 150));
  return x;
}

function drawTopology(s) {
  const svg = $('topo');
  const x = hostX(s);
  const rows = Math.max(1, ...s.hosts.map((h) => s.devices.filter((d) => d.host === h.id).length));
  svg.replaceChildren();
  const w = Math.max(300, 150 * s.hosts.length);
  svg.setAttribute('viewBox', `0 0 ${w} ${110 + rows * 18}`);
  svg.setAttribute('width', w);
  s.links.forEach((l, i) => {
    if (!x.has(l.a) || !x.has(l.b)) return;
    const [a, b] = [x.get(l.a), x.get(l.b)];
    const bend = Math.abs(a - b) > 150 ? -30 - (i % 3) * 8 : 0;
    svg.append(el('svg:path', { d: `M${a},40 Q${(a + b) / 2},${40 + bend} ${b},40`, fill: 'none', stroke: '#8a949e' }));
    svg.append(el('svg:text', { x: (a + b) / 2, y: 36 + bend / 2, 'text-anchor': 'middle', class: 'muted', text: l.latency_us + ' µs' }));
  });
  for (const h of s.hosts) {
    const hx = x.get(h.id);
    svg.append(el('svg:rect', { x: hx - 55, y: 25, width: 110, height: 30, rx: 5, class: h.down ? 'down' : '', fill: '#eef1f4', stroke: '#1d232a' }));
    svg.append(el('svg:text', { x: hx, y: 44, 'text-anchor': 'middle', text: h.id + (h.down ? ' (down)' : '') }));
    svg.append(el('svg:text', { x: hx, y: 70, 'text-anchor': 'middle', class: 'muted', text: (h.simulated ? 'SIM ' : 'REAL ') + h.vnfm }));
    s.devices.filter((d) => d.host === h.id).forEach((d, k) => {
      svg.append(el('svg:text', { x: hx, y: 88 + k * 18, 'text-anchor': 'middle', class: d.tier, text: `${d.id} (${d.tier})` }));
    });
  }
}

const TIER = { software: '#4c9be8', table: '#f0a030', accelerator: '#9b59b6' };

function drawChains(s) {
  const box = $('chains');
  const inst = new Map(s.instances.map((i) => [i.id, i]));
  const admin = st.role === 'admin';
  box.replaceChildren();
  if (!s.services.length) box.append(el('p', { class: 'muted', text: 'No service deployed.' }));
  for (const svc of s.services) {
    const steps = [{ label: 'in', host: svc.ingress }, ...svc.hops.map((h) => ({ hop: h, host: h.host })), { label: 'out', host: svc.egress }];
    const w = Math.max(400, steps.length * 150);
    const svg = el('svg:svg', { viewBox: `0 0 ${w} 95`, width: w, 'aria-label': 'chain of ' + svc.id });
    steps.forEach((p, i) => {
      const cx = 20 + i * 150;
      const sameAsPrev = i > 0 && steps[i - 1].host === p.host;
      if (!sameAsPrev) {
        let n = 1;
        while (i + n < steps.length && steps[i + n].host === p.host) n++;
        svg.append(el('svg:rect', { x: cx - 10, y: 5, width: n * 150 - 20, height: 85, rx: 6, fill: '#f0f2f5', stroke: '#c5cbd2' }));
        svg.append(el('svg:text', { x: cx - 4, y: 18, class: 'muted', text: 'host ' + p.host }));
      }
      if (i > 0) svg.append(el('svg:line', { x1: cx - 30, y1: 55, x2: cx, y2: 55, stroke: '#1d232a' }));
      if (!p.hop) {
        svg.append(el('svg:text', { x: cx + 10, y: 59, text: p.label }));
        return;
      }
      const i2 = inst.get(p.hop.instance);
      const tier = i2 ? i2.tier : 'software';
      const sim = !i2 || i2.simulated;
      svg.append(el('svg:rect', { x: cx, y: 28, width: 120, height: 54, rx: 4, fill: TIER[tier], 'fill-opacity': 0.35, stroke: TIER[tier], 'stroke-width': sim ? 1.5 : 3, 'stroke-dasharray': sim ? '5,3' : '' }));
      svg.append(el('svg:text', { x: cx + 6, y: 44, text: p.hop.function + ' · ' + tier }));
      svg.append(el('svg:text', { x: cx + 6, y: 60, class: 'muted', text: p.hop.device }));
      svg.append(el('svg:text', { x: cx + 6, y: 76, text: (sim ? 'SIM ' : 'REAL ') + (i2 && i2.live ? fmt(i2.live.pps) + ' pkt/s' : '') }));
    });
    const destroy = el('button', { type: 'button', class: 'danger', 'data-service': svc.id, text: 'Destroy' });
    destroy.disabled = !admin;
    destroy.title = admin ? 'Destroy this service' : 'needs the admin token';
    destroy.addEventListener('click', () => ask(`Destroy service ${svc.id}? Its traffic is steered away and its instances destroyed.`, null,
      () => act('DELETE', '/api/v1/services/' + encodeURIComponent(svc.id))));
    box.append(el('div', { class: 'chain', id: 'svc-' + svc.id },
      el('h3', { text: `${svc.id} (tenant ${svc.tenant}) — ${svc.status} ` }, destroy), svg));
  }
}

function drawNodes(s) {
  const body = $('nodes').tBodies[0];
  const admin = st.role === 'admin';
  body.replaceChildren();
  for (const i of s.instances) {
    const l = i.live;
    const mig = el('button', { type: 'button', 'data-instance': i.id, text: 'Migrate' });
    mig.disabled = !admin;
    mig.title = admin ? 'Move this instance and its flow state' : 'needs the admin token';
    mig.addEventListener('click', () => ask(`Migrate instance ${i.id} (${i.function} on ${i.device})?`,
      s.devices.filter((d) => d.id !== i.device),
      (dev) => act('POST', `/api/v1/instances/${encodeURIComponent(i.id)}/migrate`, dev ? { device: dev } : {})));
    const drops = l && l.drops !== null ? fmt(l.drops) : '—';
    const why = l ? Object.entries(l.drops_by_reason).filter(([, n]) => n > 0).map(([k, n]) => `${k}: ${n}`).join(', ') : (i.live_error || '');
    body.append(el('tr', { 'data-instance': i.id },
      el('td', { text: i.id }), el('td', { text: i.function }), el('td', { text: `${i.host} / ${i.device}` }),
      el('td', {}, el('span', { class: 'chip ' + i.tier, text: i.tier })),
      el('td', {}, el('span', { class: 'chip ' + (i.simulated ? 'sim' : 'real'), text: (i.simulated ? 'SIM ' : 'REAL ') + i.vnfm })),
      el('td', { class: 'num packets', 'data-instance': i.id, text: l ? fmt(l.packets) : '—' }),
      el('td', { class: 'num pps', text: l ? fmt(l.pps) : '—' }),
      el('td', { class: 'num drops', title: why, text: drops }),
      el('td', { class: 'num', text: l ? fmt(l.drops_per_s) : '—' }),
      el('td', { class: 'num', text: l ? fmt(l.flows) : '—' }),
      el('td', { class: 'num', text: l ? fmt(l.cpu_pct, 1) : '—' }),
      el('td', {}, mig)));
  }
}

function drawAccel(s) {
  const box = $('accel');
  box.replaceChildren();
  const acc = s.devices.filter((d) => d.tier === 'accelerator');
  if (!acc.length) box.append(el('p', { class: 'muted', text: 'No accelerator device in the infrastructure.' }));
  for (const d of acc) {
    const h = st.accel.get(d.id) || [];
    h.push(d.capacity_used);
    while (h.length > HISTORY) h.shift();
    st.accel.set(d.id, h);
    const w = 480, ht = 40, top = Math.max(1, d.capacity_total);
    const pts = h.map((v, k) => `${(k * w) / (HISTORY - 1)},${ht - (v / top) * ht}`).join(' ');
    const svg = el('svg:svg', { viewBox: `0 0 ${w} ${ht + 2}`, width: w },
      el('svg:rect', { x: 0, y: 0, width: w, height: ht, fill: '#f5eefa' }),
      el('svg:polyline', { points: pts, fill: 'none', stroke: TIER.accelerator, 'stroke-width': 2 }));
    box.append(el('div', { 'data-device': d.id },
      el('p', { text: `${d.id} on ${d.host}: ${fmt(d.capacity_used, 1)} of ${fmt(d.capacity_total)} queue pairs granted to ${d.instances} instance(s)` }), svg));
  }
}

// Energy per service and per host as the agents report it; every figure shows its
// source (rapl = measured, model = the host's power model driven by CPU time).
function drawEnergy(e) {
  $('energy').textContent = e.reported ? '' : e.reason;
  const svc = $('energy-services').tBodies[0];
  svc.replaceChildren();
  for (const v of e.services) {
    svc.append(el('tr', { 'data-service': v.service },
      el('td', { text: v.service }), el('td', { class: 'num', text: v.energy_j.toFixed(1) }),
      el('td', { class: 'num', text: v.power_w.toFixed(2) }), el('td', { class: 'source', text: v.source }),
      el('td', { text: v.unmetered.join(', ') })));
  }
  const hosts = $('energy-hosts').tBodies[0];
  hosts.replaceChildren();
  for (const h of e.hosts) {
    hosts.append(el('tr', { 'data-host': h.host },
      el('td', { text: h.host }), el('td', { class: 'num', text: h.error ? '' : h.energy_j.toFixed(1) }),
      el('td', { class: 'num', text: h.error ? '' : h.power_w.toFixed(2) }),
      el('td', { class: 'source', text: h.error ? 'not metered: ' + h.error : h.source })));
  }
}

function drawOps(s) {
  const body = $('ops').tBodies[0];
  body.replaceChildren();
  for (const o of s.operations) {
    body.append(el('tr', { 'data-operation': o.id },
      el('td', { text: o.id }), el('td', { text: o.kind }), el('td', { text: o.target }),
      el('td', { class: 'state', text: o.state }), el('td', { text: `${o.steps_done}/${o.steps}` }),
      el('td', { text: new Date(o.updated_ms).toLocaleTimeString() }), el('td', { class: 'error', text: o.error || '' })));
  }
}

// ---- actions, each behind a confirmation ----

function ask(text, targets, go) {
  const d = $('confirm');
  $('confirm-text').textContent = text;
  const sel = $('confirm-target');
  $('confirm-target-row').hidden = !targets;
  sel.replaceChildren(el('option', { value: '', text: 'best device on the same host' }),
    ...(targets || []).map((t) => el('option', { value: t.id, text: `${t.id} (${t.host}, ${t.tier})` })));
  d.onclose = () => { if (d.returnValue === 'ok') go(sel.value); };
  d.returnValue = '';
  d.showModal();
}

async function act(method, path, body) {
  const out = $('action-result');
  out.textContent = `${method} ${path} …`;
  try {
    const r = await fetch(path, {
      method,
      headers: { Authorization: 'Bearer ' + token(), 'Content-Type': 'application/json' },
      body: body ? JSON.stringify(body) : undefined,
    });
    const v = await r.json();
    out.textContent = r.ok ? `${method} ${path}: operation ${v.id} ${v.state}` : `${method} ${path}: ${r.status} ${v.error}`;
  } catch (e) {
    out.textContent = `${method} ${path}: ${e}`;
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('login-form').addEventListener('submit', (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY, $('token').value.trim());
    $('token').value = '';
    start();
  });
  $('logout').addEventListener('click', () => {
    sessionStorage.removeItem(KEY);
    showLogin('');
  });
  if (token()) start();
  else showLogin('');
});
