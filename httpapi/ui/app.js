// leafmq status page: polls status.json every second and renders it.
// No dependencies, no build step. Everything is built with DOM calls
// (textContent), never innerHTML, so tag names and descriptions are inert.
'use strict';
(() => {
  const POLL_MS = 1000;
  const STALE_MS = 5000;

  const $ = (id) => document.getElementById(id);
  const prev = new Map(); // counter key -> {ns, value, started}
  const rates = new Map(); // counter key -> ids/s over the last interval
  let polls = 0;
  let lastOK = 0;
  let lastDoc = null;

  // h builds an element: h('td', {class: 'num'}, 'text', child, …).
  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of kids.flat()) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const nf = new Intl.NumberFormat('en-US');
  const num = (n) => (typeof n === 'number' ? nf.format(n) : '—');

  function rate(r) {
    if (r === undefined) return '—';
    if (r < 10) return r.toFixed(1) + '/s';
    return nf.format(Math.round(r)) + '/s';
  }

  // runwayCell shows a tag's ids left before its domain ends and, at the
  // rate r (ids/s), how long they last; a century or more is "100y+".
  function runwayCell(headroom, r) {
    if (headroom === undefined || headroom < 0) return h('td', {class: 'num runway'}, '—');
    let left = null;
    if (r > 0) {
      const s = headroom / r;
      left = h('div', {class: 'small muted'}, s >= 100 * 365 * 86400 ? '100y+' : dur(s * 1e9));
    }
    return h('td', {class: 'num runway', title: 'ids left before the tag\'s domain ends'}, num(headroom), left);
  }

  // workersCell shows the worker ids of a node's region that a new node
  // can still get, of the region's capacity, warned under a tenth (the
  // alert LeafmqSnowflakeWorkerIdsLow's line); "—" for a registry that
  // counts none (static).
  function workersCell(s) {
    if (s.workers_free === undefined) return h('td', {class: 'num workers'}, '—');
    const low = s.workers_free < s.workers_cap / 10;
    return h('td', {class: 'num workers' + (low ? ' warn' : ''), title: 'worker ids of the region a new node can still get'},
      num(s.workers_free), h('div', {class: 'small muted'}, 'of ' + num(s.workers_cap)));
  }

  function dur(ns) {
    let s = Math.abs(ns) / 1e9;
    const sign = ns < 0 ? '-' : '';
    if (s < 1) return sign + Math.round(s * 1000) + 'ms';
    if (s < 60) return sign + s.toFixed(1) + 's';
    const d = Math.floor(s / 86400); s -= d * 86400;
    const hh = Math.floor(s / 3600); s -= hh * 3600;
    const mm = Math.floor(s / 60); s -= mm * 60;
    if (d > 0) return `${sign}${d}d ${hh}h`;
    if (hh > 0) return `${sign}${hh}h ${mm}m`;
    return `${sign}${mm}m ${Math.floor(s)}s`;
  }

  function clock(ns) {
    if (!ns) return '—';
    const d = new Date(ns / 1e6);
    return d.toLocaleTimeString([], {hour12: false}) + '.' + String(d.getMilliseconds()).padStart(3, '0');
  }

  // stamp is a local "yyyy-MM-dd HH:mm:ss", the form of Leaf's pages.
  function stamp(d) {
    const p = (x) => String(x).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }

  function date(ns) {
    return ns ? stamp(new Date(ns / 1e6)) : '—';
  }

  // id shows an id (a buffer's value or max, a row's max_id) as the store
  // has it: no digit grouping, so that it can be copied and compared.
  const id = (n) => (typeof n === 'number' ? String(n) : '—');

  // counter records a monotonic counter of one node and returns its rate
  // since the previous poll (undefined on the first sight or after a restart).
  function counter(key, node, value) {
    const p = prev.get(key);
    prev.set(key, {ns: node.unix_nano, value, started: node.started});
    if (!p || p.started !== node.started || value < p.value || node.unix_nano <= p.ns) {
      return rates.get(key);
    }
    const r = (value - p.value) / ((node.unix_nano - p.ns) / 1e9);
    rates.set(key, r);
    return r;
  }

  function bar(used, cap, title) {
    const pct = cap > 0 ? Math.max(0, Math.min(100, (100 * used) / cap)) : 0;
    const fill = h('span', {class: 'fill'});
    fill.style.width = pct.toFixed(1) + '%';
    return h('span', {class: 'bar', title: title || `${num(used)} / ${num(cap)}`}, fill);
  }

  function badge(ok, yes, no) {
    return h('span', {class: 'badge ' + (ok ? 'ok' : 'bad')}, ok ? yes : no);
  }

  function table(cls, headers, rows, empty) {
    if (rows.length === 0) return h('p', {class: 'muted'}, empty);
    return h('div', {class: 'scroll'},
      h('table', {class: cls},
        h('thead', null, h('tr', null, headers.map((x) => h('th', null, x)))),
        h('tbody', null, rows)));
  }

  function filterText() {
    return $('filter').value.trim().toLowerCase();
  }

  function renderNodes(doc) {
    const cards = doc.nodes.map((n) => {
      const reqRate = counter('req\u0000' + n.node, n, n.requests);
      return h('div', {class: 'card' + (n.ready ? '' : ' notready'), 'data-node': n.node},
        h('div', {class: 'card-head'}, h('strong', null, n.node), badge(n.ready, 'ready', 'not ready')),
        h('dl', null,
          h('dt', null, 'version'), h('dd', null, n.version || '—'),
          h('dt', null, 'store'), h('dd', null, n.store || '—'),
          h('dt', null, 'up'), h('dd', null, n.started ? dur(n.unix_nano - n.started) : '—'),
          h('dt', null, 'requests'), h('dd', null, num(n.requests), ' ', h('span', {class: 'muted'}, rate(reqRate))),
          h('dt', null, 'errors'), h('dd', {class: n.errors > 0 ? 'warn' : null}, num(n.errors)),
          h('dt', null, 'tags'), h('dd', null, num((n.tags || []).length), n.tags_cut ? ' (cut)' : ''),
          h('dt', null, 'clock'), h('dd', null, clock(n.unix_nano)),
          ...(n.subjects || []).flatMap((s) => [
            h('dt', null, s.subject),
            h('dd', {'data-subject': s.subject, title: (s.problems || []).join('; ') || null},
              s.serving ? badge(s.ready, 'ready', 'not ready') : h('span', {class: 'badge'}, 'not serving'),
              s.subject === 'pool' ? '' : h('span', {class: 'muted'}, ` · ${num(s.probed)} probes answered`))])),
        (n.problems || []).length > 0 &&
          h('ul', {class: 'problems'}, n.problems.map((p) => h('li', null, p))));
    });
    $('node-cards').replaceChildren(...(cards.length ? cards : [h('p', {class: 'muted'}, 'no node has answered')]));
  }

  function renderSnowflake(doc) {
    const rows = [];
    for (const n of doc.nodes) {
      const s = n.snowflake;
      if (!s) continue;
      const r = counter('snow\u0000' + n.node, n, s.taken);
      const lease = s.lease_until ? s.lease_until - n.unix_nano : null;
      rows.push(h('tr', {'data-node': n.node},
        h('td', null, n.node),
        h('td', null, h('span', {class: 'badge ' + (s.state === 'serving' ? 'ok' : 'bad')}, s.state)),
        h('td', {class: 'num'}, s.worker >= 0 ? s.worker : '—'),
        h('td', null, s.registry),
        h('td', null, badge(s.joined, 'yes', 'no')),
        h('td', {class: lease !== null && lease < 0 ? 'warn' : null, title: date(s.lease_until)},
          s.lease_until ? `${clock(s.lease_until)} (${lease >= 0 ? '+' : ''}${dur(lease)})` : '—'),
        h('td', {class: 'num'}, dur(s.peer_offset)),
        h('td', null, s.ring_cap > 0 ? [bar(s.ring_len, s.ring_cap), ' ', h('span', {class: 'muted'}, `${num(s.ring_len)}/${num(s.ring_cap)}`)] : '—'),
        h('td', {class: 'num'}, num(s.taken)),
        h('td', {class: 'num'}, rate(r)),
        workersCell(s),
        h('td', {class: 'small'}, s.layout, h('br'), h('span', {class: 'muted'}, 'expires ' + date(s.expires)))));
    }
    $('snowflake-table').replaceChildren(table('grid',
      ['node', 'state', 'worker', 'registry', 'joined', 'lease until', 'peer offset', 'ring', 'taken', 'ids/s', 'free worker ids', 'layout'],
      rows, 'snowflake is off on every node'));
  }

  function bufferCell(b, current) {
    const used = b.step > 0 ? b.value - (b.max - b.step) : 0;
    return h('td', {class: 'buf' + (current ? ' cur' : '') + (b.ready ? '' : ' empty')},
      h('div', null, h('span', {class: 'num'}, id(b.value)), h('span', {class: 'muted'}, ' → '), h('span', {class: 'num'}, id(b.max))),
      bar(used, b.step, `${num(used)} of ${num(b.step)} used`),
      h('div', {class: 'small muted'}, `step ${num(b.step)} · ${b.ready ? 'ready' : 'empty'}${current ? ' · current' : ''}`));
  }

  function renderTags(doc) {
    const f = filterText();
    const list = [];
    for (const n of doc.nodes) {
      for (const t of n.tags || []) list.push([t, n]);
    }
    list.sort((a, b) => (a[0].tag < b[0].tag ? -1 : a[0].tag > b[0].tag ? 1 : a[1].node < b[1].node ? -1 : 1));
    const rows = [];
    for (const [t, n] of list) {
      const r = counter('tag\u0000' + n.node + '\u0000' + t.tag, n, t.taken);
      if (f && !t.tag.toLowerCase().includes(f)) continue;
      const state = t.refused
        ? h('span', {class: 'badge bad', title: t.refused}, 'refused')
        : t.last_error
        ? h('span', {class: 'badge bad', title: t.last_error}, 'load failed')
        : t.loading ? h('span', {class: 'badge'}, 'loading') : h('span', {class: 'badge ok'}, 'ok');
      rows.push(h('tr', {'data-tag': t.tag, 'data-node': n.node},
        h('td', null, h('strong', null, t.tag)),
        h('td', null, n.node),
        bufferCell(t.buffers[0], t.current === 0),
        bufferCell(t.buffers[1], t.current === 1),
        h('td', {class: 'num'}, num(t.step), t.min_step && t.min_step !== t.step ? h('div', {class: 'small muted'}, 'row ' + num(t.min_step)) : null),
        h('td', {class: 'num', title: date(t.last_load)}, num(t.loads), h('div', {class: 'small muted'}, t.last_load ? dur(n.unix_nano - t.last_load) + ' ago' : 'never')),
        h('td', null, t.ring_cap > 0 ? [bar(t.ring_len, t.ring_cap), h('div', {class: 'small muted'}, `${num(t.ring_len)}/${num(t.ring_cap)}`)] : '—'),
        h('td', {class: 'num'}, num(t.taken)),
        h('td', {class: 'num rate'}, rate(r)),
        runwayCell(t.headroom, r),
        h('td', null, state, t.last_error ? h('div', {class: 'small warn'}, t.last_error) : null)));
    }
    $('tag-table').replaceChildren(table('grid',
      ['tag', 'node', 'buffer 0', 'buffer 1', 'step', 'loads', 'ring', 'taken', 'ids/s', 'runway', 'state'],
      rows, f ? 'no tag matches the filter' : 'no tag is cached on any node yet'));
  }

  function renderRows(doc) {
    if (doc.rows === null || doc.rows === undefined) {
      $('row-table').replaceChildren(h('p', {class: 'muted'}, 'the store table is not available on this node'));
      return;
    }
    const f = filterText();
    const rows = doc.rows.filter((r) => !f || r.tag.toLowerCase().includes(f)).map((r) => {
      const t = Date.parse(r.update_time);
      return h('tr', {'data-row': r.tag},
        h('td', null, h('strong', null, r.tag)),
        h('td', {class: 'num'}, id(r.max_id)),
        h('td', {class: 'num'}, num(r.step)),
        h('td', null, r.description),
        h('td', null, t > 0 ? stamp(new Date(t)) : '—'));
    });
    $('row-table').replaceChildren(table('grid', ['tag', 'max_id', 'step', 'description', 'update_time'], rows,
      f ? 'no row matches the filter' : 'the table has no row'));
  }

  function render(doc) {
    lastDoc = doc;
    const ready = doc.nodes.filter((n) => n.ready).length;
    const tags = new Set();
    for (const n of doc.nodes) for (const t of n.tags || []) tags.add(t.tag);
    $('summary').textContent =
      `${doc.nodes.length} node${doc.nodes.length === 1 ? '' : 's'} · ${ready} ready · ${tags.size} tag${tags.size === 1 ? '' : 's'} · ${clock(doc.time)}`;
    const errs = doc.errors || [];
    $('errors').hidden = errs.length === 0;
    $('errors').replaceChildren(...errs.map((e) => h('div', null, e)));
    renderNodes(doc);
    renderSnowflake(doc);
    renderTags(doc);
    renderRows(doc);
  }

  function pill(cls, text) {
    const p = $('poll');
    p.className = 'pill ' + cls;
    p.textContent = text;
  }

  async function poll() {
    try {
      const res = await fetch('status.json', {cache: 'no-store'});
      if (!res.ok) throw new Error(`status.json: HTTP ${res.status}`);
      render(await res.json());
      polls++;
      lastOK = Date.now();
      document.body.dataset.polls = String(polls);
      pill('ok', 'live');
    } catch (e) {
      pill(Date.now() - lastOK > STALE_MS ? 'bad' : 'warn', String(e && e.message ? e.message : e));
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  // Filtering re-renders the last answer at once; rates are not counted twice
  // because counter() only advances when a node's clock does.
  $('filter').addEventListener('input', () => { if (lastDoc) render(lastDoc); });
  poll();
})();
