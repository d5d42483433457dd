/* relpos explorer: the page. Every number shown comes from the relpos JSON API
 * (or from the snapshot an export embeds); this file only lays them out. */
(function () {
  'use strict';

  const SNAP = window.RELPOS_SNAPSHOT || null;
  const MINUS = '\u2212';

  // ------------------------------------------------------------------ text

  const I18N = {
    en: {
      skip: 'Skip to the content',
      title: 'relpos explorer',
      tagline: 'How relative positions enter attention. Every number on this page is computed by the relpos library.',
      'tab.offsets': '1 · Relative distance',
      'tab.bias': '2 · Bias matrices',
      'tab.shift': '3 · Absolute vs relative',
      'tab.extrap': '4 · Extrapolation',
      'tab.attn': '5 · Attention maps',
      snapshot: 'Static snapshot made with relpos explore --export {date}. It holds precomputed values for the default settings; for live values on any input, run relpos explore.',
      snapshot_miss: 'This setting is not in the snapshot. Run relpos explore for live values.',
      snapshot_readonly: 'Editing is off in a snapshot.',
      loading: 'Computing…',
      footer: 'Numbers come from <code>relpos</code> itself (<code>relpos.distance</code>, <code>relpos.encodings</code>, checkpoints through <code>relpos.checkpoint.load</code>). Colours: Okabe–Ito and ColorBrewer RdBu / viridis, chosen to survive colour-blindness; every colour is also written out as text.',
      'err.too_large': 'Too large: at most {limit} {unit}. {msg}',
      'err.empty': 'Nothing to show yet: {msg}',
      'err.generic': '{msg}',
      'unit.chars': 'characters', 'unit.tokens': 'tokens', 'unit.bytes': 'bytes', 'unit.heads': 'heads',
      'unit.positions': 'positions', 'unit.dims': 'dimensions', 'unit.value': '', 'unit.request': 'bytes',

      'v1.title': 'Relative distance',
      'v1.lead': 'Attention compares a query token i with every key token j. A relative scheme never looks at i or j on their own, only at the offset between them. Click a token to make it the query: every other token then shows its offset.',
      'v1.formula': '<b>d = j − i</b> (relpos’s convention: keys to the left of the query, earlier in the text, get d &lt; 0). The switch flips it to d = i − j, as Transformer-XL and ALiBi write it. A learned table (Shaw et al.) keeps only 2k + 1 rows, so the offset is clipped: <b>clip(d, −k, k) = max(−k, min(k, d))</b>; every key further than k tokens away shares an end row.',
      'v1.text': 'Sentence',
      'v1.text_hint': 'Words, punctuation marks and single CJK characters become tokens.',
      'v1.flip': 'Flip the sign: d = i − j',
      'v1.conv_ji': 'Now: d = j − i (key minus query).',
      'v1.conv_ij': 'Now: d = i − j (query minus key).',
      'v1.clip': 'Clip distance k (tokens)',
      'v1.clip_hint': 'Offsets beyond ±k saturate at −k or k.',
      'v1.click_hint': 'Click a token, or focus it and press Enter, to make it the query i.',
      'v1.tokens_label': 'Tokens of the sentence',
      'v1.leg_left': 'blue ◀: left of the query (j < i)',
      'v1.leg_self': 'black ●: the query itself (d = 0)',
      'v1.leg_right': 'orange ▶: right of the query (j > i)',
      'v1.leg_sat': 'dashed border: offset clipped to ±k',
      'v1.readout': 'Query i = {i} (“{tok}”). Offsets run from {lo} to {hi}. With k = {k}, {nsat} of them saturate; the table needs 2k + 1 = {rows} rows.',
      'v1.tok_aria': '{tok}, position {j}, offset {d}{clip}, {side}',
      'v1.side_left': 'left of the query', 'v1.side_right': 'right of the query', 'v1.side_self': 'the query',
      'v1.clipped_to': 'clipped to {v}',
      'v1.row_j': 'key j', 'v1.row_d': 'offset d', 'v1.row_clip': 'clipped', 'v1.row_index': 'table row d + k',

      'v2.title': 'Bias matrices',
      'v2.lead': 'Many relative schemes add a number b(i, j) to the attention logit: logit = q·k / √D + b(i, j). When b depends on d = j − i only, the matrix is constant along each diagonal. Left: b for every query i and key j of one head. Right: the same term against the offset d for all heads (the chosen head drawn bold). The schemes marked “typed text” add a term that depends on the tokens as well; for them the view reads a text you type.',
      'v2.scheme': 'Scheme', 'v2.n': 'Length N (tokens)', 'v2.causal': 'Causal (keys after the query are masked)',
      'v2.heads': 'Heads H', 'v2.head': 'Head shown', 'v2.head_dim': 'Head dimension D', 'v2.seed': 'Seed of the initial values',
      'v2.show': 'Show', 'v2.show_bias': 'bias value', 'v2.show_bucket': 'bucket id', 'v2.options': 'Scheme parameters',
      'v2.head_n': 'head {h}',
      'v2.unavailable': '(not in this build)',
      'v2.hm_cap': '{what} for head {h}, N = {n}. Rows: query i ↓, columns: key j →.',
      'v2.hm_cap_nohead': '{what}, N = {n}. Rows: query i ↓, columns: key j →.',
      'v2.curve_cap': '{what} against the offset d = j − i.',
      'v2.curve_row': '{what} along the row of the last query i = {i} (this scheme depends on i too).',
      'v2.x': 'offset d = j − i (tokens)',
      'v2.what.bias': 'Bias b(i, j) in logit units', 'v2.what.bucket': 'Bucket id', 'v2.what.norm': 'Norm ‖aᴷ‖ of the table row',
      'v2.y.bias': 'bias (logit units)', 'v2.y.bucket': 'bucket id', 'v2.y.norm': 'row norm ‖aᴷ‖',
      'v2.cell': 'query i = {i}, key j = {j}, d = j − i = {d}: {name} = {v}',
      'v2.cell_masked': 'query i = {i}, key j = {j}, d = {d}: masked (a causal query never sees later keys)',
      'v2.buckets': 'Bucket boundaries', 'v2.bucket': 'bucket', 'v2.range': 'offsets d', 'v2.width': 'width',
      'v2.slopes': 'Slopes m_h of the heads: {v}',
      'v2.r1r2': 'r₁ per head: {r1}; r₂ per head: {r2}',
      'v2.learned': 'Learned values shown are the seeded random initialisation (seed {seed}), as before training. Learned parameters: {p}.',
      'v2.fixed': 'No learned parameters: the values are fixed by the formula.',
      'v2.paper': 'Paper',
      'v2.legend_masked': 'grey with a stripe: masked',
      'opt.num_buckets': 'Number of buckets', 'opt.max_distance': 'Max distance (tokens)', 'opt.init_std': 'Std of the initial values',
      'opt.k': 'Clip distance k (tokens)', 'opt.per_head': 'One table per head', 'opt.m': 'Exact range m (tokens)',
      'opt.max_bucket': 'Largest bucket (0: none)', 'opt.mlp_width': 'MLP width', 'opt.init_c': 'Initial c',
      'opt.init_L': 'Initial threshold L (tokens)', 'opt.eps': 'ε of the normaliser', 'opt.pos_dim': 'Sinusoid dimension d′',
      'opt.base': 'Sinusoid base', 'opt.compress': 'Per-head compression 1/r_h', 'set.slope': 'Slope m of the shown head',
      'set.r1': 'r₁ of the shown head', 'set.r2': 'r₂ of the shown head',
      'scheme.t5': 'T5 buckets', 'scheme.log2': 'Simplified log2 buckets', 'scheme.alibi': 'ALiBi',
      'scheme.kerple-log': 'KERPLE (log kernel)', 'scheme.kerple-power': 'KERPLE (power kernel)', 'scheme.fire': 'FIRE',
      'scheme.sandwich': 'Sandwich', 'scheme.shaw': 'Shaw key-table norms',
      'x.t5': 'T5 keeps one learned number per bucket and head. Offsets inside the exact range (|d| < n/2, with n buckets per direction) get a bucket each; further ones share logarithmically wider buckets up to max distance, and everything beyond falls into the last bucket. Bidirectional attention has separate buckets for d > 0; causal attention puts every later key in bucket 0. The learned numbers here are a seeded random start, so bands of equal colour are the buckets; choose “bucket id” to see the ids themselves.',
      'f.t5': 'b(i, j) = T[bucket(j − i), h];  bucket(d) = |d| if |d| < n/2, else min(n − 1, n/2 + ⌊ln(|d| / (n/2)) / ln(max_distance / (n/2)) · (n − n/2)⌋), plus n when d > 0 (bidirectional)',
      'x.log2': 'A simplified bucketing seen in teaching material: exact up to m, then one bucket per doubling of the distance, with the sign kept. It is not T5’s formula (T5 spreads its log buckets up to max distance); compare the two boundary tables. In causal mode only d ≤ 0 is measured.',
      'f.log2': 'b(a) = a for a ≤ m;  b(a) = m + ⌊log₂(a / m)⌋ + 1 for a > m;  bucket = sign(d) · b(|d|)',
      'x.alibi': 'ALiBi has no learned parameters: head h subtracts a penalty proportional to the distance, with a fixed slope m_h from a geometric sequence. Steep heads attend locally, flat heads far away. You may set the slope of the shown head.',
      'f.alibi': 'b(i, j) = −m_h · |i − j|,  m_h = 2^(−8h/H), h = 1 … H (H a power of two)',
      'x.kerple-log': 'KERPLE with the logarithmic kernel: two learned positive numbers per head; the penalty grows like a logarithm, so far keys are penalised much less than by ALiBi.',
      'f.kerple-log': 'b(i, j) = −r₁ · ln(1 + r₂ · |i − j|),  r₁, r₂ > 0',
      'x.kerple-power': 'KERPLE with the power kernel: the penalty is a power of the distance with a learned exponent between 0 and 2.',
      'f.kerple-power': 'b(i, j) = −r₁ · |i − j|^r₂,  r₁ > 0, 0 < r₂ ≤ 2',
      'x.fire': 'FIRE feeds a normalised log distance to a small learned MLP. The normaliser uses the query position, so b is not a function of d alone once i passes the threshold L; the curve follows the last query’s row.',
      'f.fire': 'b(i, j) = f_θ( ψ(i − j) / ψ(max(L, i)) ),  ψ(x) = ln(c·x + 1)',
      'x.sandwich': 'Sandwich has no learned parameters: it uses the dot product of the sinusoidal embeddings of i and j, which depends on i − j only and falls off with distance; each head scales it down by r_h.',
      'f.sandwich': 'b(i, j) = (Σₖ cos((j − i)·ωₖ) − d′/2) / r_h,  ωₖ = 10000^(−2k/d′),  r_h = 8h / H',
      'x.shaw': 'Shaw et al. learn a vector aᴷ per clipped offset and add it to the key, so the term q_i·aᴷ / √D depends on the query too. The heatmap shows the length ‖aᴷ‖ of the table row each pair uses (a seeded random start): all pairs beyond ±k reuse the end rows.',
      'f.shaw': 'score(i, j) = q_i · aᴷ[clip(j − i, −k, k)] / √D',
      'scheme.dpb': 'Dynamic Position Bias (MLP)', 'scheme.deberta': 'DeBERTa · typed text',
      'scheme.cope': 'CoPE · typed text', 'scheme.fox': 'FoX forget gates · typed text',
      'opt.hidden': 'MLP hidden width', 'opt.depth': 'Hidden layers', 'opt.log_distance': 'Feed sign(d)·ln(1 + |d|) instead of d',
      'opt.norm': 'LayerNorm inside the MLP', 'opt.position_buckets': 'Position buckets S (0: no buckets)',
      'opt.max_relative_positions': 'Max relative distance (tokens)', 'opt.layer_norm': 'LayerNorm on the position table',
      'opt.share_projections': 'One projection for both terms', 'opt.npos_max': 'Table size (largest position + 1)',
      'opt.bias_init': 'Initial gate bias b_h',
      'v2.lib_default': 'The library starts at {v}; this view starts at {w} so the effect shows.',
      'x.dpb': 'Dynamic Position Bias learns a function instead of a table: a small MLP reads the offset d (or sign(d)·ln(1 + |d|)) and returns one number per head. Because it is a smooth function of d, offsets never met in training still get a finite bias. Like T5 and ALiBi it depends on d alone, so the matrix is constant along each diagonal. The MLP weights shown are the seeded random start.',
      'f.dpb': 'b(i, j) = MLP(u)[h],  u = d = j − i  (or sign(d)·ln(1 + |d|)),  MLP: Linear(1, w) → SiLU → … → Linear(w, H)',
      'x.deberta': 'DeBERTa keeps content and position apart. A table of relative-position vectors is projected into position keys K_r and position queries Q_r, and two terms join the content score q_i·k_j: the query looks at where the key is (content-to-position, c2p) and the key looks at where the query is (position-to-content, p2c). Mind the sign: DeBERTa indexes its table by i − j, query minus key, the opposite of d = j − i used elsewhere on this page; beyond S/2 tokens the offsets share log-spaced buckets. All three terms share one scaling, 1/√(3D). Right: the table row δ(i, j) each pair uses.',
      'f.deberta': 'score(i, j) = ( q_i · K_r[δ(i, j)] + k_j · Q_r[δ(i, j)] ) / √(3D),  δ(i, j) = clamp(bucket(i − j) + S, 0, 2S − 1)',
      'x.cope': 'CoPE lets the content decide what counts as one step. Query i opens a gate g = σ(q_i·k_t / √D) between 0 and 1 for every key t, and the position of key j is the sum of the gates from j up to i: a soft count of the tokens the query finds relevant, not of all tokens. That count p_ij is fractional, so the learned table e, one vector per whole position, is interpolated. Causal attention only. The paper starts e at zero, which would make the term 0 everywhere; this view starts it at std 0.1. Right: the contextual positions p_ij.',
      'f.cope': 'score(i, j) = q_i · e[p_ij],  p_ij = σ(q_i · k_j / √D) + σ(q_i · k_{j+1} / √D) + … + σ(q_i · k_i / √D),  e[p] = (p − ⌊p⌋)·e[⌈p⌉] + (1 − p + ⌊p⌋)·e[⌊p⌋]',
      'x.fox': 'The Forgetting Transformer gives every token t a forget gate f_t between 0 and 1, computed from that token (in relpos from its key: f_t = σ(w_h·k_t + b_h)). Attention from query i to an earlier key j is damped by every gate passed on the way back, so the term adds up ln f_t over the tokens after j up to i. It is 0 on the diagonal and only falls as j moves into the past, like ALiBi, but the slope depends on the tokens: one token with a small gate makes the head forget most of what came before it. Causal attention only. The library starts w at std 0.02, which leaves every gate near 1/2; this view uses 0.25 so the gates differ. Right: the gates f_t.',
      'f.fox': 'score(i, j) = ln f_{j+1} + ln f_{j+2} + … + ln f_i  (0 when j = i, masked when j > i),  f_t = σ(w_h · k_t + b_h)',
      'v2.content_note': 'This term depends on the content, not only on i and j. Each distinct token gets a fixed random vector (seed {seed}), seeded random projections turn it into q and k for every head, and the heatmap is the scheme’s own score(q, k) computed by relpos. Change the text and the matrix changes; T5 or ALiBi would show the same matrix for any text of the same length.',
      'v2.text': 'Text', 'v2.text_hint': 'Words, punctuation marks and single CJK characters become tokens (at most 64). The same token always gets the same vector.',
      'v2.what.score': 'Score term in logit units',
      'v2.cell_content': 'query i = {i} (“{a}”), key j = {j} (“{b}”): score = {v}',
      'v2.cell_cope': 'query i = {i} (“{a}”), key j = {j} (“{b}”): score = {v}; contextual position p = {p}',
      'v2.cell_content_masked': 'query i = {i} (“{a}”), key j = {j} (“{b}”): masked (a causal query never sees later keys)',
      'v2.aux_cope': 'Contextual positions p_ij of head {h}: the sum of the gates from key j up to query i (clipped at {cap}).',
      'v2.aux_deberta': 'Table row δ(i, j) each pair uses (S = {s}); it grows with i − j, query minus key.',
      'v2.aux_cell_cope': 'query i = {i} (“{a}”), key j = {j} (“{b}”): p = {p}',
      'v2.aux_cell_deberta': 'query i = {i} (“{a}”), key j = {j} (“{b}”): i − j = {r}, table row δ = {v}',
      'v2.gates_cap': 'Forget gate f_t of each token, every head (head {h} bold). A gate near 0 makes the head forget what came before that token.',
      'v2.gates_x': 'token t', 'v2.gates_y': 'forget gate f_t',
      'v2.row_t': 't', 'v2.row_tok': 'token', 'v2.row_gate': 'f_t (head {h})', 'v2.row_log': 'ln f_t',
      'v2.scale': 'Scale used: {s}. Token vectors: {c} numbers each.',

      'v3.title': 'Absolute against relative',
      'v3.lead': 'Same tokens, same weights; only the positions move. The sequence sits first at positions 0 … N−1, then at c … c+N−1. An absolute scheme adds a vector per position to each token, so its logits change. A relative scheme only sees j − i, which a shift leaves alone, so its logits stay equal (the difference is zero up to float rounding).',
      'v3.formula': '(i + c) − (j + c) = i − j, so b(i + c, j + c) = b(i, j);  but p<sub>i+c</sub> ≠ p<sub>i</sub> for an absolute embedding.',
      'v3.abs': 'Absolute scheme', 'v3.rel': 'Relative scheme', 'v3.c': 'Shift c (positions)', 'v3.n': 'Length N (tokens)',
      'v3.head': 'Head shown', 'v3.seed': 'Seed of the content',
      'v3.hint': 'Shown: full attention logits q′·k′/√D + bias + score of one head, for fixed random token vectors and projections (H = 2, D = 16). Learned tables start at std 1 so their effect is visible.',
      'v3.base': 'positions 0 … {e}', 'v3.shifted': 'positions {c} … {e}', 'v3.diff': 'difference (shifted − original)',
      'v3.kind_abs': 'absolute', 'v3.kind_rel': 'relative',
      'v3.changed': 'Changed: max |difference| = {v} logit units.',
      'v3.same': 'Unchanged: max |difference| = {v} (float32 rounding only, below {tol}).',
      'v3.cell': 'query i = {i}, key j = {j}: original {a}, shifted {b}, difference {d}',

      'v4.title': 'Extrapolation',
      'v4.lead': 'Models trained at one length (dashed line) and evaluated at longer ones, from a relpos compare results folder. Each line is one scheme, the mean over seeds; the shaded band spans the lowest to the highest seed. A scheme that extrapolates keeps its curve flat to the right of the training length.',
      'v4.formula': 'bits per byte = loss / ln 2 (loss in nats per byte); accuracy = fraction of answers exactly right.',
      'v4.source': 'Results', 'v4.file': 'Or load a results.json file', 'v4.task': 'Task', 'v4.metric': 'Metric',
      'v4.table': 'Numbers', 'v4.none': 'No results loaded. Start relpos explore with --results DIR (a relpos compare output folder), or load a results.json file.',
      'v4.upload': 'uploaded file',
      'v4.x': 'evaluation length (tokens, log scale)',
      'v4.train': 'train length {n}',
      'v4.cap': '{metric} against evaluation length, task “{task}” ({src}).',
      'metric.bpb': 'bits per byte (lower is better)', 'metric.loss': 'loss in nats (lower is better)',
      'metric.ppl': 'perplexity (lower is better)', 'metric.accuracy': 'accuracy, fraction correct (higher is better)',
      'metric.token_accuracy': 'token accuracy, fraction of symbols right (higher is better)',
      'v4.toggle': 'show or hide this line',
      'v4.col_series': 'scheme', 'v4.col_len': 'eval length', 'v4.col_mean': 'mean', 'v4.col_min': 'min', 'v4.col_max': 'max', 'v4.col_n': 'seeds',

      'v5.title': 'Attention maps',
      'v5.lead': 'A trained model reads your text byte by byte. For the chosen layer and head, row i shows how query byte i spreads its attention over the keys j; each row sums to 1. In a causal model the part above the diagonal is masked.',
      'v5.formula': 'p<sub>ij</sub> = softmax<sub>j</sub>( q′<sub>i</sub>·k′<sub>j</sub> / √D + b(i, j) + score(i, j) )',
      'v5.ckpt': 'Checkpoint', 'v5.text': 'Text (read as UTF-8 bytes)', 'v5.layer': 'Layer', 'v5.head': 'Head',
      'v5.all_heads': 'All heads of this layer (click one)',
      'v5.none': 'No checkpoint loaded. Start relpos explore with --checkpoint DIR (a folder written by relpos train).',
      'v5.ckpt_info': 'scheme {scheme}, {layers} layers × {heads} heads, max length {max}',
      'v5.cap': 'Attention probabilities, layer {l}, head {h} ({n} bytes). Rows: query i ↓, columns: key j →.',
      'v5.cell': 'query i = {i} (“{a}”) → key j = {j} (“{b}”): p = {p}',
      'v5.thumb': 'head {h}',
      'layer_n': 'layer {l}',
      'hm.keys': '(arrow keys move a cursor and read the value)'
    },
    zh: {
      skip: '跳到正文',
      title: 'relpos 可视化探索',
      tagline: '相对位置如何进入注意力。本页的每一个数字都由 relpos 库计算得出。',
      'tab.offsets': '1 · 相对距离',
      'tab.bias': '2 · 偏置矩阵',
      'tab.shift': '3 · 绝对与相对',
      'tab.extrap': '4 · 长度外推',
      'tab.attn': '5 · 注意力图',
      snapshot: '这是用 relpos explore --export 导出的静态快照（{date}），只包含默认设置下预先算好的数值；想对任意输入实时计算，请运行 relpos explore。',
      snapshot_miss: '快照里没有这个设置的数据。请运行 relpos explore 实时计算。',
      snapshot_readonly: '快照中不能编辑。',
      loading: '计算中……',
      footer: '数字全部来自 <code>relpos</code> 本身（<code>relpos.distance</code>、<code>relpos.encodings</code>，检查点经 <code>relpos.checkpoint.load</code> 安全加载）。配色采用 Okabe–Ito 与 ColorBrewer RdBu / viridis，对色觉障碍友好；每种颜色的含义也都以文字写出。',
      'err.too_large': '输入过大：最多 {limit} {unit}。（{msg}）',
      'err.empty': '还没有可显示的内容：{msg}',
      'err.generic': '{msg}',
      'unit.chars': '个字符', 'unit.tokens': '个词元', 'unit.bytes': '字节', 'unit.heads': '个头',
      'unit.positions': '个位置', 'unit.dims': '维', 'unit.value': '', 'unit.request': '字节',

      'v1.title': '相对距离',
      'v1.lead': '注意力把查询词元 i 与每个键词元 j 作比较。相对位置方案从不单独看 i 或 j，只看两者之间的偏移。点击一个词元，把它设为查询，其余每个词元都会显示自己相对于它的偏移。',
      'v1.formula': '<b>d = j − i</b>（relpos 的约定：位于查询左侧、在文本中更早出现的键，d &lt; 0）。开关可把符号翻转为 d = i − j，Transformer-XL 与 ALiBi 的论文就这样写。可学习的相对位置表（Shaw 等人）只有 2k + 1 行，所以偏移要先裁剪：<b>clip(d, −k, k) = max(−k, min(k, d))</b>；距离超过 k 的键都共用表两端的那一行。',
      'v1.text': '句子',
      'v1.text_hint': '单词、标点和单个汉字（或其他 CJK 字符）各算一个词元。',
      'v1.flip': '翻转符号：d = i − j',
      'v1.conv_ji': '当前：d = j − i（键减查询）。',
      'v1.conv_ij': '当前：d = i − j（查询减键）。',
      'v1.clip': '裁剪距离 k（词元）',
      'v1.clip_hint': '超出 ±k 的偏移被截在 −k 或 k。',
      'v1.click_hint': '点击一个词元（或用 Tab 选中后按回车），把它设为查询 i。',
      'v1.tokens_label': '句子中的词元',
      'v1.leg_left': '蓝色 ◀：在查询左侧（j < i）',
      'v1.leg_self': '黑色 ●：查询本身（d = 0）',
      'v1.leg_right': '橙色 ▶：在查询右侧（j > i）',
      'v1.leg_sat': '虚线边框：偏移被裁剪到 ±k',
      'v1.readout': '查询 i = {i}（“{tok}”）。偏移范围从 {lo} 到 {hi}。取 k = {k} 时，有 {nsat} 个偏移被截断；位置表需要 2k + 1 = {rows} 行。',
      'v1.tok_aria': '{tok}，位置 {j}，偏移 {d}{clip}，{side}',
      'v1.side_left': '在查询左侧', 'v1.side_right': '在查询右侧', 'v1.side_self': '查询本身',
      'v1.clipped_to': '，裁剪后为 {v}',
      'v1.row_j': '键 j', 'v1.row_d': '偏移 d', 'v1.row_clip': '裁剪后', 'v1.row_index': '表中行号 d + k',

      'v2.title': '偏置矩阵',
      'v2.lead': '许多相对位置方案在注意力打分上加一个数 b(i, j)：logit = q·k / √D + b(i, j)。若 b 只依赖 d = j − i，矩阵沿每条对角线取值相同。左图：某一个头对每个查询 i 和键 j 的 b；右图：同一项随偏移 d 的变化，画出所有头（选中的头用粗线）。标有“输入文本”的方案所加的项还依赖词元本身；选择它们时，本视图读取你输入的文本。',
      'v2.scheme': '方案', 'v2.n': '序列长度 N（词元）', 'v2.causal': '因果（屏蔽查询之后的键）',
      'v2.heads': '头数 H', 'v2.head': '显示的头', 'v2.head_dim': '每头维度 D', 'v2.seed': '初始值的随机种子',
      'v2.show': '显示', 'v2.show_bias': '偏置值', 'v2.show_bucket': '桶编号', 'v2.options': '方案参数',
      'v2.head_n': '第 {h} 个头',
      'v2.unavailable': '（此版本未包含）',
      'v2.hm_cap': '{what}，第 {h} 个头，N = {n}。行：查询 i ↓，列：键 j →。',
      'v2.hm_cap_nohead': '{what}，N = {n}。行：查询 i ↓，列：键 j →。',
      'v2.curve_cap': '{what}随偏移 d = j − i 的变化。',
      'v2.curve_row': '{what}沿最后一个查询 i = {i} 所在的行（此方案还依赖 i）。',
      'v2.x': '偏移 d = j − i（词元）',
      'v2.what.bias': '偏置 b(i, j)（logit 单位）', 'v2.what.bucket': '桶编号', 'v2.what.norm': '表中对应行的范数 ‖aᴷ‖',
      'v2.y.bias': '偏置（logit 单位）', 'v2.y.bucket': '桶编号', 'v2.y.norm': '行范数 ‖aᴷ‖',
      'v2.cell': '查询 i = {i}，键 j = {j}，d = j − i = {d}：{name} = {v}',
      'v2.cell_masked': '查询 i = {i}，键 j = {j}，d = {d}：已屏蔽（因果注意力看不到后面的键）',
      'v2.buckets': '桶的边界', 'v2.bucket': '桶', 'v2.range': '偏移 d', 'v2.width': '宽度',
      'v2.slopes': '各头的斜率 m_h：{v}',
      'v2.r1r2': '各头的 r₁：{r1}；各头的 r₂：{r2}',
      'v2.learned': '图中的可学习数值是按种子 {seed} 生成的随机初始值（即训练之前的样子）。可学习参数个数：{p}。',
      'v2.fixed': '没有可学习参数：数值完全由公式决定。',
      'v2.paper': '论文',
      'v2.legend_masked': '带斜纹的灰色：已屏蔽',
      'opt.num_buckets': '桶的数量', 'opt.max_distance': '最大距离（词元）', 'opt.init_std': '初始值的标准差',
      'opt.k': '裁剪距离 k（词元）', 'opt.per_head': '每个头一张表', 'opt.m': '精确区间 m（词元）',
      'opt.max_bucket': '最大桶号（0 表示不限）', 'opt.mlp_width': 'MLP 宽度', 'opt.init_c': 'c 的初始值',
      'opt.init_L': '阈值 L 的初始值（词元）', 'opt.eps': '归一化项中的 ε', 'opt.pos_dim': '正弦嵌入维度 d′',
      'opt.base': '正弦的底数', 'opt.compress': '按头压缩 1/r_h', 'set.slope': '当前头的斜率 m',
      'set.r1': '当前头的 r₁', 'set.r2': '当前头的 r₂',
      'scheme.t5': 'T5 分桶', 'scheme.log2': '简化的 log2 分桶', 'scheme.alibi': 'ALiBi',
      'scheme.kerple-log': 'KERPLE（对数核）', 'scheme.kerple-power': 'KERPLE（幂核）', 'scheme.fire': 'FIRE',
      'scheme.sandwich': 'Sandwich', 'scheme.shaw': 'Shaw 键表的行范数',
      'x.t5': 'T5 为每个桶、每个头各学一个数。精确区间内的偏移（|d| < n/2，n 为每个方向的桶数）各占一个桶；更远的偏移按对数间隔合并进越来越宽的桶，直到最大距离，再远的全部落入最后一个桶。双向注意力为 d > 0 另设一套桶；因果注意力把所有后面的键都放进 0 号桶。这里的可学习数值是按种子生成的随机初始值，所以颜色相同的条带就是一个桶；选择“桶编号”可直接看编号。',
      'f.t5': 'b(i, j) = T[bucket(j − i), h]；当 |d| < n/2 时 bucket(d) = |d|，否则 bucket(d) = min(n − 1, n/2 + ⌊ln(|d| / (n/2)) / ln(max_distance / (n/2)) · (n − n/2)⌋)；双向时 d > 0 再加 n',
      'x.log2': '教学材料中常见的一种简化分桶：m 以内逐一精确，之后距离每翻一倍才多一个桶，并保留符号。它并不是 T5 的公式（T5 把对数桶一直铺到最大距离）；可以对比两者的边界表。因果模式下只区分 d ≤ 0。',
      'f.log2': 'a ≤ m 时 b(a) = a；a > m 时 b(a) = m + ⌊log₂(a / m)⌋ + 1；桶号 = sign(d) · b(|d|)',
      'x.alibi': 'ALiBi 没有可学习参数：第 h 个头按距离线性扣分，斜率 m_h 取自一个固定的等比数列。斜率大的头只看附近，斜率小的头能看得更远。可以手动设置当前头的斜率。',
      'f.alibi': 'b(i, j) = −m_h · |i − j|，m_h = 2^(−8h/H)，h = 1 … H（H 为 2 的幂）',
      'x.kerple-log': 'KERPLE 对数核：每个头学两个正数；惩罚按对数增长，所以远处的键比 ALiBi 下受罚少得多。',
      'f.kerple-log': 'b(i, j) = −r₁ · ln(1 + r₂ · |i − j|)，r₁, r₂ > 0',
      'x.kerple-power': 'KERPLE 幂核：惩罚是距离的幂，指数可学习，取值在 0 到 2 之间。',
      'f.kerple-power': 'b(i, j) = −r₁ · |i − j|^r₂，r₁ > 0，0 < r₂ ≤ 2',
      'x.fire': 'FIRE 把归一化后的对数距离送进一个小型可学习 MLP。归一化项用到查询位置 i，所以一旦 i 超过阈值 L，b 就不再只是 d 的函数；右图取最后一个查询所在的行。',
      'f.fire': 'b(i, j) = f_θ( ψ(i − j) / ψ(max(L, i)) )，ψ(x) = ln(c·x + 1)',
      'x.sandwich': 'Sandwich 没有可学习参数：它取 i 与 j 的正弦位置嵌入的点积，这个值只依赖 i − j，并随距离衰减；每个头再除以 r_h 缩小。',
      'f.sandwich': 'b(i, j) = (Σₖ cos((j − i)·ωₖ) − d′/2) / r_h，ωₖ = 10000^(−2k/d′)，r_h = 8h / H',
      'x.shaw': 'Shaw 等人为每个裁剪后的偏移学一个向量 aᴷ 并加到键上，所以 q_i·aᴷ / √D 这一项还依赖查询。热力图显示每对 (i, j) 用到的那一行的长度 ‖aᴷ‖（随机初始值）：超出 ±k 的所有位置对都重复使用两端的行。',
      'f.shaw': 'score(i, j) = q_i · aᴷ[clip(j − i, −k, k)] / √D',
      'scheme.dpb': '动态位置偏置（MLP）', 'scheme.deberta': 'DeBERTa · 输入文本',
      'scheme.cope': 'CoPE · 输入文本', 'scheme.fox': 'FoX 遗忘门 · 输入文本',
      'opt.hidden': 'MLP 隐藏层宽度', 'opt.depth': '隐藏层数', 'opt.log_distance': '输入 sign(d)·ln(1 + |d|) 而不是 d',
      'opt.norm': 'MLP 内使用 LayerNorm', 'opt.position_buckets': '位置桶数 S（0 表示不分桶）',
      'opt.max_relative_positions': '最大相对距离（词元）', 'opt.layer_norm': '对位置表做 LayerNorm',
      'opt.share_projections': '两项共用一个投影', 'opt.npos_max': '表的大小（最大位置 + 1）',
      'opt.bias_init': '门偏置 b_h 的初始值',
      'v2.lib_default': '库里的初始值是 {v}；为了让效果看得出来，本视图从 {w} 开始。',
      'x.dpb': '动态位置偏置学的不是一张表，而是一个函数：一个小型 MLP 读入偏移 d（或 sign(d)·ln(1 + |d|)），为每个头输出一个数。由于它是 d 的光滑函数，训练中从未出现过的偏移也能得到有限的偏置。它和 T5、ALiBi 一样只依赖 d，所以矩阵沿每条对角线取值相同。图中的 MLP 权重是按种子生成的随机初始值。',
      'f.dpb': 'b(i, j) = MLP(u)[h]，u = d = j − i（或 sign(d)·ln(1 + |d|)），MLP：Linear(1, w) → SiLU → … → Linear(w, H)',
      'x.deberta': 'DeBERTa 把内容和位置分开处理。一张相对位置向量表被投影成位置键 K_r 和位置查询 Q_r，在内容打分 q_i·k_j 之外再加两项：查询看键所在的位置（内容到位置，c2p），键看查询所在的位置（位置到内容，p2c）。注意符号：DeBERTa 用 i − j（查询减键）来索引位置表，和本页其他地方的 d = j − i 正好相反；超过 S/2 个词元的偏移按对数间隔合并进桶。三项共用同一个缩放 1/√(3D)。右图：每对 (i, j) 用到的表中行号 δ(i, j)。',
      'f.deberta': 'score(i, j) = ( q_i · K_r[δ(i, j)] + k_j · Q_r[δ(i, j)] ) / √(3D)，δ(i, j) = clamp(bucket(i − j) + S, 0, 2S − 1)',
      'x.cope': 'CoPE 让内容来决定什么算“一步”。查询 i 对每个键 t 打开一个取值在 0 到 1 之间的门 g = σ(q_i·k_t / √D)，键 j 的位置就是从 j 到 i 所有门的和：它数的是查询认为相关的词元，而不是所有词元。这个计数 p_ij 是小数，所以可学习的表 e（每个整数位置一个向量）要做插值。只用于因果注意力。论文把 e 初始化为零，这样这一项处处为 0；本视图用标准差 0.1 初始化。右图：上下文位置 p_ij。',
      'f.cope': 'score(i, j) = q_i · e[p_ij]，p_ij = σ(q_i · k_j / √D) + σ(q_i · k_{j+1} / √D) + … + σ(q_i · k_i / √D)，e[p] = (p − ⌊p⌋)·e[⌈p⌉] + (1 − p + ⌊p⌋)·e[⌊p⌋]',
      'x.fox': '遗忘 Transformer（FoX）为每个词元 t 计算一个 0 到 1 之间的遗忘门 f_t，它由该词元本身决定（relpos 中由它的键算出：f_t = σ(w_h·k_t + b_h)）。查询 i 对更早的键 j 的注意力，会被回溯途中经过的每一个门削弱，所以这一项是 j 之后直到 i 的各个词元的 ln f_t 之和。它在对角线上为 0，j 越往前只会越小，这一点像 ALiBi，但斜率由词元决定：一个门很小的词元会让这个头几乎忘掉它之前的全部内容。只用于因果注意力。库里 w 的初始标准差是 0.02，所有门都接近 1/2；本视图用 0.25，让各个门明显不同。右图：各词元的门 f_t。',
      'f.fox': 'score(i, j) = ln f_{j+1} + ln f_{j+2} + … + ln f_i（j = i 时为 0，j > i 时屏蔽），f_t = σ(w_h · k_t + b_h)',
      'v2.content_note': '这一项依赖内容，而不只依赖 i 和 j。每个不同的词元对应一个固定的随机向量（种子 {seed}），再经带种子的随机投影得到每个头的 q 和 k，热力图就是 relpos 中该方案自己的 score(q, k)。改动文本，矩阵就会改变；而 T5 或 ALiBi 对任何同样长度的文本都给出同一个矩阵。',
      'v2.text': '文本', 'v2.text_hint': '单词、标点和单个汉字（或其他 CJK 字符）各算一个词元（最多 64 个）。同一个词元总是对应同一个向量。',
      'v2.what.score': '打分项（logit 单位）',
      'v2.cell_content': '查询 i = {i}（“{a}”），键 j = {j}（“{b}”）：score = {v}',
      'v2.cell_cope': '查询 i = {i}（“{a}”），键 j = {j}（“{b}”）：score = {v}；上下文位置 p = {p}',
      'v2.cell_content_masked': '查询 i = {i}（“{a}”），键 j = {j}（“{b}”）：已屏蔽（因果注意力看不到后面的键）',
      'v2.aux_cope': '第 {h} 个头的上下文位置 p_ij：从键 j 到查询 i 所有门的和（上限 {cap}）。',
      'v2.aux_deberta': '每对 (i, j) 用到的表中行号 δ(i, j)（S = {s}）；它随 i − j（查询减键）增大。',
      'v2.aux_cell_cope': '查询 i = {i}（“{a}”），键 j = {j}（“{b}”）：p = {p}',
      'v2.aux_cell_deberta': '查询 i = {i}（“{a}”），键 j = {j}（“{b}”）：i − j = {r}，表中行号 δ = {v}',
      'v2.gates_cap': '每个词元的遗忘门 f_t，画出所有头（第 {h} 个头用粗线）。门接近 0 时，这个头会忘掉该词元之前的内容。',
      'v2.gates_x': '词元 t', 'v2.gates_y': '遗忘门 f_t',
      'v2.row_t': 't', 'v2.row_tok': '词元', 'v2.row_gate': 'f_t（第 {h} 个头）', 'v2.row_log': 'ln f_t',
      'v2.scale': '所用缩放：{s}。每个词元向量有 {c} 个数。',

      'v3.title': '绝对与相对',
      'v3.lead': '词元相同、权重相同，只移动位置：序列先放在 0 … N−1，再整体平移到 c … c+N−1。绝对方案给每个位置一个向量并加到词元上，所以打分会变；相对方案只看 j − i，而平移不改变它，所以打分保持不变（差值为零，只剩浮点舍入误差）。',
      'v3.formula': '(i + c) − (j + c) = i − j，因此 b(i + c, j + c) = b(i, j)；但对绝对位置嵌入来说 p<sub>i+c</sub> ≠ p<sub>i</sub>。',
      'v3.abs': '绝对方案', 'v3.rel': '相对方案', 'v3.c': '平移量 c（位置）', 'v3.n': '序列长度 N（词元）',
      'v3.head': '显示的头', 'v3.seed': '内容的随机种子',
      'v3.hint': '图中是某一个头完整的注意力打分 q′·k′/√D + 偏置 + 打分项，词元向量和投影矩阵是固定的随机值（H = 2，D = 16）。可学习的表按标准差 1 初始化，好让效果看得见。',
      'v3.base': '位置 0 … {e}', 'v3.shifted': '位置 {c} … {e}', 'v3.diff': '差值（平移后 − 平移前）',
      'v3.kind_abs': '绝对', 'v3.kind_rel': '相对',
      'v3.changed': '变了：最大 |差值| = {v}（logit 单位）。',
      'v3.same': '没变：最大 |差值| = {v}（只是 float32 舍入误差，低于 {tol}）。',
      'v3.cell': '查询 i = {i}，键 j = {j}：平移前 {a}，平移后 {b}，差值 {d}',

      'v4.title': '长度外推',
      'v4.lead': '模型在某个长度上训练（虚线），再在更长的序列上评测；数据来自 relpos compare 的结果目录。每条线是一个方案在各随机种子上的平均，阴影带覆盖最差到最好的种子。能外推的方案在训练长度右侧仍保持平坦。',
      'v4.formula': '每字节比特数 = 损失 / ln 2（损失以 nat/字节计）；准确率 = 完全答对的比例。',
      'v4.source': '结果', 'v4.file': '或载入一个 results.json 文件', 'v4.task': '任务', 'v4.metric': '指标',
      'v4.table': '具体数值', 'v4.none': '尚未载入结果。请用 relpos explore --results DIR（relpos compare 的输出目录）启动，或载入一个 results.json 文件。',
      'v4.upload': '上传的文件',
      'v4.x': '评测长度（词元，对数刻度）',
      'v4.train': '训练长度 {n}',
      'v4.cap': '{metric}随评测长度的变化，任务“{task}”（{src}）。',
      'metric.bpb': '每字节比特数（越低越好）', 'metric.loss': '损失，单位 nat（越低越好）',
      'metric.ppl': '困惑度（越低越好）', 'metric.accuracy': '准确率，答对的比例（越高越好）',
      'metric.token_accuracy': '逐符号准确率，答对的符号比例（越高越好）',
      'v4.toggle': '显示或隐藏这条线',
      'v4.col_series': '方案', 'v4.col_len': '评测长度', 'v4.col_mean': '平均', 'v4.col_min': '最小', 'v4.col_max': '最大', 'v4.col_n': '种子数',

      'v5.title': '注意力图',
      'v5.lead': '一个训练好的模型逐字节读入你的文本。对选定的层和头，第 i 行显示查询字节 i 把注意力如何分配给各个键 j；每行之和为 1。因果模型中对角线以上的部分被屏蔽。',
      'v5.formula': 'p<sub>ij</sub> = softmax<sub>j</sub>( q′<sub>i</sub>·k′<sub>j</sub> / √D + b(i, j) + score(i, j) )',
      'v5.ckpt': '检查点', 'v5.text': '文本（按 UTF-8 字节读取）', 'v5.layer': '层', 'v5.head': '头',
      'v5.all_heads': '本层的所有头（点击选择）',
      'v5.none': '尚未载入检查点。请用 relpos explore --checkpoint DIR（relpos train 写出的目录）启动。',
      'v5.ckpt_info': '方案 {scheme}，{layers} 层 × {heads} 个头，最大长度 {max}',
      'v5.cap': '注意力概率，第 {l} 层，第 {h} 个头（{n} 字节）。行：查询 i ↓，列：键 j →。',
      'v5.cell': '查询 i = {i}（“{a}”）→ 键 j = {j}（“{b}”）：p = {p}',
      'v5.thumb': '第 {h} 个头',
      'layer_n': '第 {l} 层',
      'hm.keys': '（方向键移动光标并读出数值）'
    }
  };

  const state = { lang: 'en', view: 'offsets', info: null };

  function t(key, vars) {
    const dict = I18N[state.lang] || I18N.en;
    let s = dict[key];
    if (s === undefined) s = I18N.en[key];
    if (s === undefined) return key;
    if (vars) s = s.replace(/\{(\w+)\}/g, (m, k) => (vars[k] === undefined ? m : String(vars[k])));
    return s;
  }
  const has = (key) => I18N.en[key] !== undefined;

  // --------------------------------------------------------------- helpers

  const $ = (sel, root) => (root || document).querySelector(sel);
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'text') e.textContent = v;
      else if (k === 'class') e.className = v;
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of kids) if (c !== null && c !== undefined) e.append(c);
    return e;
  }
  const SVGNS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) e.setAttribute(k, v);
    for (const c of kids) if (c) e.append(c);
    return e;
  }
  const minus = (s) => String(s).replace(/^-/, MINUS).replace(/e-/, 'e' + MINUS);
  const fmtInt = (v) => minus(v);
  function fmtNum(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return '—';
    if (v === 0) return '0';
    const a = Math.abs(v);
    let s;
    if (a >= 1e-3 && a < 1e6) s = String(Number(v.toPrecision(digits || 6)));
    else s = v.toExponential((digits || 6) - 1).replace(/\.?0+e/, 'e');
    return minus(s);
  }
  function debounce(fn, ms) {
    let h = null;
    return (...a) => { clearTimeout(h); h = setTimeout(() => fn(...a), ms); };
  }
  const clampInt = (v, lo, hi, dflt) => {
    const n = Number.parseInt(v, 10);
    if (!Number.isFinite(n)) return dflt;
    return Math.min(hi, Math.max(lo, n));
  };

  // ------------------------------------------------------------------- api

  function snapKey(route, params) {
    const entries = Object.keys(params).sort().map((k) => [k, String(params[k])]);
    return route + '?' + JSON.stringify(entries);
  }
  class ApiFailure extends Error {
    constructor(info) { super((info && info.error) || 'error'); this.info = info || {}; }
  }
  async function api(route, params, body) {
    params = params || {};
    if (SNAP) {
      if (body) throw new ApiFailure({ error: t('snapshot_readonly'), code: 'snapshot_miss' });
      const hit = SNAP.responses[snapKey(route, params)];
      if (!hit) throw new ApiFailure({ error: t('snapshot_miss'), code: 'snapshot_miss' });
      if (hit.error) throw new ApiFailure(hit.error);
      return hit.data;
    }
    const qs = new URLSearchParams(Object.keys(params).sort().map((k) => [k, String(params[k])])).toString();
    const url = 'api/' + route + (qs ? '?' + qs : '');
    const init = body ? { method: 'POST', body: body, headers: { 'Content-Type': 'application/json' } } : {};
    const res = await fetch(url, init);
    let data = null;
    try { data = await res.json(); } catch (e) { data = { error: 'HTTP ' + res.status }; }
    if (!res.ok) throw new ApiFailure(data);
    return data;
  }

  // one in-flight request per view: later answers win, stale ones are dropped
  function latest() {
    let n = 0;
    return async (fn) => {
      const mine = ++n;
      const out = await fn();
      return mine === n ? out : undefined;
    };
  }

  function errorText(err) {
    const info = (err && err.info) || { error: String(err) };
    const msg = info.error || String(err);
    if (info.code === 'too_large' && info.limit !== null && info.limit !== undefined) {
      return t('err.too_large', { limit: info.limit, unit: t('unit.' + (info.unit || 'value')), msg: msg });
    }
    if (info.code === 'empty') return t('err.empty', { msg: msg });
    return msg;
  }
  function showError(view, err) {
    const box = $('#' + view + '-error');
    if (!box) return;
    if (!err) { box.hidden = true; box.textContent = ''; return; }
    box.textContent = errorText(err);
    box.hidden = false;
  }

  // ------------------------------------------------------------- colours

  const OKABE = ['#0072B2', '#E69F00', '#009E73', '#D55E00', '#CC79A7', '#56B4E9', '#000000', '#F0E442'];
  const DASHES = ['', '7 4', '2 3', '9 3 2 3'];
  const MARKERS = ['circle', 'square', 'triangle', 'diamond'];
  const RDBU = ['#2166ac', '#4393c3', '#92c5de', '#d1e5f0', '#f7f7f7', '#fddbc7', '#f4a582', '#d6604d', '#b2182b'];
  const VIRIDIS = ['#440154', '#482878', '#3e4989', '#31688e', '#26828e', '#1f9e89', '#35b779', '#6ece58', '#b5de2b', '#fde725'];
  const hexRgb = (h) => [1, 3, 5].map((k) => parseInt(h.slice(k, k + 2), 16));
  const RDBU_RGB = RDBU.map(hexRgb);
  const VIR_RGB = VIRIDIS.map(hexRgb);
  function ramp(stops, x) {
    x = Math.min(1, Math.max(0, x));
    const p = x * (stops.length - 1);
    const k = Math.min(stops.length - 2, Math.floor(p));
    const f = p - k;
    const a = stops[k], b = stops[k + 1];
    return [0, 1, 2].map((c) => Math.round(a[c] + (b[c] - a[c]) * f));
  }
  // scale: {kind: 'diverging', m} (centred at 0) or {kind: 'sequential', lo, hi}
  function colourOf(v, sc) {
    if (sc.kind === 'diverging') return ramp(RDBU_RGB, sc.m > 0 ? 0.5 + v / (2 * sc.m) : 0.5);
    return ramp(VIR_RGB, sc.hi > sc.lo ? (v - sc.lo) / (sc.hi - sc.lo) : 0.5);
  }
  function scaleFor(values, kind) {
    let lo = Infinity, hi = -Infinity;
    for (const v of values) if (v !== null && Number.isFinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; }
    if (!Number.isFinite(lo)) { lo = 0; hi = 0; }
    if (kind === 'diverging') return { kind, m: Math.max(Math.abs(lo), Math.abs(hi)), lo, hi };
    return { kind: 'sequential', lo, hi };
  }
  const rgbCss = (c) => 'rgb(' + c.join(',') + ')';

  // ------------------------------------------------------------- heatmap

  // A canvas heatmap with ticks or token labels, a colour bar, mouse and keyboard reading.
  function Heatmap(host, opts) {
    opts = opts || {};
    const wrap = el('div', { class: 'hm' });
    const canvas = el('canvas', { tabindex: '0', class: 'hm-canvas', role: 'img' });
    const bar = el('canvas', { class: 'hm-bar', 'aria-hidden': 'true' });
    const barLabels = el('div', { class: 'hm-bar-labels' });
    wrap.append(canvas, el('div', { class: 'hm-barwrap' }, bar, barLabels));
    host.replaceChildren(wrap);
    const hm = { canvas, cursor: null, data: null, geom: null };
    const maxSize = opts.maxSize || 440;

    hm.draw = function (data) {
      hm.data = data;
      const n = data.matrix.length, m = data.matrix[0].length;
      if (hm.cursor) hm.cursor = [Math.min(hm.cursor[0], n - 1), Math.min(hm.cursor[1], m - 1)];
      const labels = data.labels;
      const avail = Math.max(120, Math.min(maxSize, (host.clientWidth || maxSize)));
      const ctx0 = canvas.getContext('2d');
      ctx0.font = '12px system-ui, sans-serif';
      let ml = 30, mt = 22;
      if (labels) {
        let w = 0;
        for (const s of labels) w = Math.max(w, ctx0.measureText(s).width);
        ml = Math.min(70, Math.ceil(w) + 8);
        mt = w <= (avail - ml - 4) / Math.max(n, m) - 1 ? 20 : ml;
      }
      const cs = (avail - ml - 4) / Math.max(n, m);
      const showLabels = labels && cs >= 9;
      if (labels && !showLabels) { ml = 30; mt = 22; }
      const cs2 = (avail - ml - 4) / Math.max(n, m);
      const W = Math.round(ml + cs2 * m + 4), Hh = Math.round(mt + cs2 * n + 4);
      const dpr = window.devicePixelRatio || 1;
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(Hh * dpr);
      canvas.style.width = W + 'px'; canvas.style.height = Hh + 'px';
      hm.geom = { ml, mt, cs: cs2, n, m, W, H: Hh };
      const ctx = canvas.getContext('2d');
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, W, Hh);
      const sc = data.scale;
      for (let i = 0; i < n; i++) {
        const y0 = Math.round(mt + i * cs2), y1 = Math.round(mt + (i + 1) * cs2);
        for (let j = 0; j < m; j++) {
          const x0 = Math.round(ml + j * cs2), x1 = Math.round(ml + (j + 1) * cs2);
          const v = data.matrix[i][j];
          const masked = data.masked && data.masked(i, j);
          if (masked || v === null) {
            ctx.fillStyle = '#d4d4d4';
            ctx.fillRect(x0, y0, x1 - x0, y1 - y0);
            if (cs2 >= 6) {
              ctx.strokeStyle = '#a8a8a8'; ctx.lineWidth = 1;
              ctx.beginPath(); ctx.moveTo(x0, y1); ctx.lineTo(x1, y0); ctx.stroke();
            }
          } else {
            ctx.fillStyle = rgbCss(colourOf(v, sc));
            ctx.fillRect(x0, y0, x1 - x0, y1 - y0);
          }
        }
      }
      // ticks / labels
      ctx.fillStyle = '#222'; ctx.font = '12px system-ui, sans-serif';
      if (showLabels) {
        ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
        for (let i = 0; i < n; i++) ctx.fillText(labels[i], ml - 4, mt + (i + 0.5) * cs2);
        let widest = 0;
        for (const s of labels) widest = Math.max(widest, ctx.measureText(s).width);
        for (let j = 0; j < m; j++) {
          if (widest <= cs2 - 1) {
            ctx.textAlign = 'center'; ctx.textBaseline = 'bottom';
            ctx.fillText(labels[j], ml + (j + 0.5) * cs2, mt - 3);
          } else {
            ctx.save(); ctx.translate(ml + (j + 0.5) * cs2, mt - 4); ctx.rotate(-Math.PI / 2);
            ctx.textAlign = 'left'; ctx.textBaseline = 'middle'; ctx.fillText(labels[j], 0, 0); ctx.restore();
          }
        }
      } else {
        const step = niceStep(Math.max(n, m), Math.max(2, Math.floor((avail - ml) / 28)));
        ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
        for (let i = 0; i < n; i += step) ctx.fillText(String(i), ml - 4, mt + (i + 0.5) * cs2);
        ctx.textAlign = 'center'; ctx.textBaseline = 'bottom';
        for (let j = 0; j < m; j += step) ctx.fillText(String(j), ml + (j + 0.5) * cs2, mt - 4);
      }
      if (hm.cursor) outline(ctx, hm.cursor[0], hm.cursor[1]);
      drawBar(data);
      canvas.setAttribute('aria-label', (data.aria || 'heatmap') + ' ' + t('hm.keys'));
    };

    function outline(ctx, i, j) {
      const g = hm.geom;
      const x = g.ml + j * g.cs, y = g.mt + i * g.cs, s = Math.max(g.cs, 3);
      ctx.lineWidth = 3; ctx.strokeStyle = '#000'; ctx.strokeRect(x - 1, y - 1, s + 2, s + 2);
      ctx.lineWidth = 1.5; ctx.strokeStyle = '#fff'; ctx.strokeRect(x - 1, y - 1, s + 2, s + 2);
    }

    function drawBar(data) {
      const sc = data.scale, g = hm.geom;
      const W = Math.min(260, g.W - g.ml), H = 12, dpr = window.devicePixelRatio || 1;
      bar.width = W * dpr; bar.height = H * dpr; bar.style.width = W + 'px'; bar.style.height = H + 'px';
      bar.style.marginLeft = g.ml + 'px'; barLabels.style.marginLeft = g.ml + 'px'; barLabels.style.width = W + 'px';
      const ctx = bar.getContext('2d'); ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      for (let x = 0; x < W; x++) {
        const f = x / (W - 1);
        const v = sc.kind === 'diverging' ? (2 * f - 1) * sc.m : sc.lo + f * (sc.hi - sc.lo);
        ctx.fillStyle = rgbCss(colourOf(v, sc)); ctx.fillRect(x, 0, 1, H);
      }
      const lo = sc.kind === 'diverging' ? -sc.m : sc.lo, hi = sc.kind === 'diverging' ? sc.m : sc.hi;
      const mid = sc.kind === 'diverging' ? '0' : '';
      const digits = Math.abs(hi) < 1e-3 && hi !== 0 ? 2 : 3;
      barLabels.replaceChildren(el('span', { text: fmtNum(lo, digits) }), el('span', { text: mid }),
        el('span', { text: fmtNum(hi, digits) + (data.unit ? ' ' + data.unit : '') }));
    }

    hm.setCursor = function (i, j, silent) {
      if (!hm.data) return;
      const g = hm.geom;
      i = Math.max(0, Math.min(g.n - 1, i)); j = Math.max(0, Math.min(g.m - 1, j));
      hm.cursor = [i, j];
      hm.draw(hm.data);
      if (!silent && opts.onCell) opts.onCell(i, j);
    };
    function cellAt(ev) {
      const g = hm.geom; if (!g) return null;
      const r = canvas.getBoundingClientRect();
      const x = ev.clientX - r.left - g.ml, y = ev.clientY - r.top - g.mt;
      const j = Math.floor(x / g.cs), i = Math.floor(y / g.cs);
      if (i < 0 || j < 0 || i >= g.n || j >= g.m) return null;
      return [i, j];
    }
    canvas.addEventListener('mousemove', (ev) => {
      const c = cellAt(ev);
      if (c && opts.onCell) opts.onCell(c[0], c[1]);
    });
    canvas.addEventListener('click', (ev) => { const c = cellAt(ev); if (c) { canvas.focus(); hm.setCursor(c[0], c[1]); } });
    canvas.addEventListener('mouseleave', () => { if (hm.cursor && opts.onCell) opts.onCell(hm.cursor[0], hm.cursor[1]); });
    canvas.addEventListener('focus', () => { if (!hm.cursor) hm.setCursor(0, 0); else if (opts.onCell) opts.onCell(hm.cursor[0], hm.cursor[1]); });
    canvas.addEventListener('keydown', (ev) => {
      if (!hm.cursor) return;
      let [i, j] = hm.cursor;
      const g = hm.geom;
      switch (ev.key) {
        case 'ArrowUp': i -= 1; break;
        case 'ArrowDown': i += 1; break;
        case 'ArrowLeft': j -= 1; break;
        case 'ArrowRight': j += 1; break;
        case 'Home': j = 0; break;
        case 'End': j = g.m - 1; break;
        case 'PageUp': i -= 8; break;
        case 'PageDown': i += 8; break;
        default: return;
      }
      ev.preventDefault();
      hm.setCursor(i, j);
    });
    return hm;
  }

  function niceStep(n, maxTicks) {
    const raw = n / Math.max(1, maxTicks);
    for (const s of [1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128, 200, 256]) if (s >= raw) return s;
    return Math.ceil(raw);
  }

  // ---------------------------------------------------------------- charts

  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) { const d = Math.abs(lo) || 1; lo -= d * 0.5; hi += d * 0.5; }
    const span = hi - lo, raw = span / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => s >= raw) || 10 * mag;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return { ticks: out, lo: Math.min(lo, out[0]), hi: Math.max(hi, out[out.length - 1]) };
  }

  function marker(kind, x, y, colour) {
    const s = 4;
    if (kind === 'square') return svg('rect', { x: x - s, y: y - s, width: 2 * s, height: 2 * s, fill: colour });
    if (kind === 'triangle') return svg('path', { d: `M${x},${y - s - 1}L${x + s + 1},${y + s}L${x - s - 1},${y + s}Z`, fill: colour });
    if (kind === 'diamond') return svg('path', { d: `M${x},${y - s - 1}L${x + s + 1},${y}L${x},${y + s + 1}L${x - s - 1},${y}Z`, fill: colour });
    return svg('circle', { cx: x, cy: y, r: s, fill: colour });
  }

  // series: [{label, xs, ys, colour, dash, width, opacity, marker, band: [lo[], hi[]], step}]
  function lineChart(host, cfg) {
    const W = Math.max(280, Math.min(cfg.maxWidth || 520, host.clientWidth || 520));
    const H = cfg.height || 300;
    const m = { l: 62, r: 14, t: 14, b: 44 };
    const xs = [], ys = [];
    for (const s of cfg.series) {
      s.xs.forEach((x, k) => { if (s.ys[k] !== null) { xs.push(x); ys.push(s.ys[k]); } });
      if (s.band) { s.band[0].forEach((v) => v !== null && ys.push(v)); s.band[1].forEach((v) => v !== null && ys.push(v)); }
    }
    for (const v of cfg.vlines || []) xs.push(v.x);
    for (const v of cfg.yInclude || []) ys.push(v);
    if (!xs.length) { host.replaceChildren(); return; }
    const tx = cfg.xLog ? (v) => Math.log2(v) : (v) => v;
    let xlo = Math.min(...xs.map(tx)), xhi = Math.max(...xs.map(tx));
    if (xhi === xlo) { xlo -= 1; xhi += 1; }
    const pad = (xhi - xlo) * 0.03; xlo -= pad; xhi += pad;
    const yt = niceTicks(Math.min(...ys), Math.max(...ys), 5);
    const X = (v) => m.l + (tx(v) - xlo) / (xhi - xlo) * (W - m.l - m.r);
    const Y = (v) => m.t + (1 - (v - yt.lo) / (yt.hi - yt.lo)) * (H - m.t - m.b);
    const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': cfg.aria || '' });
    // grid + y ticks
    for (const v of yt.ticks) {
      root.append(svg('line', { x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v), stroke: '#e3e3e3' }));
      const tt = svg('text', { x: m.l - 6, y: Y(v) + 4, 'text-anchor': 'end', class: 'tick' }); tt.textContent = fmtNum(v, 4); root.append(tt);
    }
    // x ticks
    let xticks;
    if (cfg.xTicks) xticks = cfg.xTicks;
    else xticks = niceTicks(xlo, xhi, Math.max(3, Math.floor((W - m.l) / 60))).ticks.filter((v) => v >= xlo && v <= xhi);
    for (const v of xticks) {
      const x = X(v);
      root.append(svg('line', { x1: x, x2: x, y1: H - m.b, y2: H - m.b + 4, stroke: '#555' }));
      const tt = svg('text', { x: x, y: H - m.b + 16, 'text-anchor': 'middle', class: 'tick' }); tt.textContent = fmtNum(v, 4); root.append(tt);
    }
    root.append(svg('line', { x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b, stroke: '#555' }));
    root.append(svg('line', { x1: m.l, x2: m.l, y1: m.t, y2: H - m.b, stroke: '#555' }));
    if (yt.lo < 0 && yt.hi > 0) root.append(svg('line', { x1: m.l, x2: W - m.r, y1: Y(0), y2: Y(0), stroke: '#999' }));
    const xl = svg('text', { x: (m.l + W - m.r) / 2, y: H - 8, 'text-anchor': 'middle', class: 'axis' }); xl.textContent = cfg.xLabel || ''; root.append(xl);
    const yl = svg('text', { x: 14, y: (m.t + H - m.b) / 2, 'text-anchor': 'middle', class: 'axis', transform: `rotate(-90 14 ${(m.t + H - m.b) / 2})` }); yl.textContent = cfg.yLabel || ''; root.append(yl);
    // vertical lines
    for (const v of cfg.vlines || []) {
      const x = X(v.x);
      root.append(svg('line', { x1: x, x2: x, y1: m.t, y2: H - m.b, stroke: v.colour || '#333', 'stroke-dasharray': v.dash || '5 4', 'stroke-width': v.width || 1 }));
      if (v.label) { const tt = svg('text', { x: x + 4, y: m.t + 12, class: 'vlabel' }); tt.textContent = v.label; root.append(tt); }
    }
    // series
    for (const s of cfg.series) {
      const g = svg('g', { opacity: s.opacity === undefined ? 1 : s.opacity, class: 'series' });
      if (s.band) {
        let d = '';
        s.xs.forEach((x, k) => { if (s.band[1][k] !== null) d += (d ? 'L' : 'M') + X(x) + ',' + Y(s.band[1][k]); });
        for (let k = s.xs.length - 1; k >= 0; k--) if (s.band[0][k] !== null) d += 'L' + X(s.xs[k]) + ',' + Y(s.band[0][k]);
        if (d) g.append(svg('path', { d: d + 'Z', fill: s.colour, 'fill-opacity': 0.15, stroke: 'none' }));
      }
      let d = '', prev = null;
      s.xs.forEach((x, k) => {
        const y = s.ys[k];
        if (y === null) { prev = null; return; }
        if (s.step && prev !== null) d += 'L' + X(x - 0.5) + ',' + Y(prev) + 'L' + X(x - 0.5) + ',' + Y(y);
        d += (prev === null ? 'M' : 'L') + X(x) + ',' + Y(y);
        prev = y;
      });
      g.append(svg('path', { d, fill: 'none', stroke: s.colour, 'stroke-width': s.width || 2, 'stroke-dasharray': s.dash || null, 'stroke-linejoin': 'round' }));
      if (s.marker) s.xs.forEach((x, k) => { if (s.ys[k] !== null) g.append(marker(s.marker, X(x), Y(s.ys[k]), s.colour)); });
      const title = svg('title'); title.textContent = s.label; g.append(title);
      root.append(g);
    }
    host.replaceChildren(root);
  }

  // ------------------------------------------------------------- i18n apply

  function applyLang() {
    document.documentElement.lang = state.lang === 'zh' ? 'zh-CN' : 'en';
    document.querySelectorAll('[data-i18n]').forEach((e) => { e.textContent = t(e.getAttribute('data-i18n')); });
    document.querySelectorAll('[data-i18n-html]').forEach((e) => { e.innerHTML = t(e.getAttribute('data-i18n-html')); });
    document.querySelectorAll('.lang button').forEach((b) => b.setAttribute('aria-pressed', String(b.dataset.lang === state.lang)));
    document.title = t('title');
    if (SNAP) {
      const b = $('#snapshot-banner');
      b.textContent = t('snapshot', { date: SNAP.created || '' });
      b.hidden = false;
    }
    for (const v of Object.values(VIEWS)) if (v.relabel) v.relabel();
  }

  // ---------------------------------------------------------------- tabs

  const VIEW_IDS = ['offsets', 'bias', 'shift', 'extrap', 'attn'];
  function showView(name, focus) {
    if (!VIEW_IDS.includes(name)) name = 'offsets';
    state.view = name;
    document.querySelectorAll('[role=tab]').forEach((b) => {
      const on = b.dataset.view === name;
      b.setAttribute('aria-selected', String(on));
      b.tabIndex = on ? 0 : -1;
      if (on && focus) b.focus();
    });
    document.querySelectorAll('.view').forEach((s) => { s.hidden = s.id !== 'view-' + name; });
    if (location.hash !== '#' + name) history.replaceState(null, '', '#' + name);
    VIEWS[name].show();
  }
  function initTabs() {
    const tabs = Array.from(document.querySelectorAll('[role=tab]'));
    tabs.forEach((b, k) => {
      b.addEventListener('click', () => showView(b.dataset.view));
      b.addEventListener('keydown', (ev) => {
        let to = null;
        if (ev.key === 'ArrowRight') to = tabs[(k + 1) % tabs.length];
        else if (ev.key === 'ArrowLeft') to = tabs[(k - 1 + tabs.length) % tabs.length];
        else if (ev.key === 'Home') to = tabs[0];
        else if (ev.key === 'End') to = tabs[tabs.length - 1];
        if (to) { ev.preventDefault(); showView(to.dataset.view, true); }
      });
    });
  }

  // ================================================================ view 1

  const V1 = (function () {
    const run = latest();
    let data = null, sel = null, loaded = false;
    const text = $('#v1-text'), flip = $('#v1-flip'), clip = $('#v1-clip'), clipOut = $('#v1-clip-out');

    async function load() {
      const params = { text: text.value, convention: flip.checked ? 'i-j' : 'j-i', clip: clip.value };
      try {
        const d = await run(() => api('offsets', params));
        if (d === undefined) return;
        showError('v1', null);
        data = d;
        const maxK = Math.max(1, d.n - 1);
        if (Number(clip.max) !== maxK) {
          clip.max = String(maxK);
          if (Number(clip.value) > maxK) { clip.value = String(maxK); clipOut.value = clip.value; return load(); }
        }
        if (sel === null || sel >= d.n) sel = Math.min(d.n - 1, Math.floor((d.n - 1) / 2));
        render();
      } catch (err) { showError('v1', err); }
    }
    const loadSoon = debounce(load, 150);

    function render() {
      relabelConv();
      if (!data) return;
      const box = $('#v1-tokens');
      const i = sel, n = data.n, k = data.clip;
      const focusIdx = box.contains(document.activeElement) ? Number(document.activeElement.dataset.j) : null;
      box.replaceChildren();
      let nsat = 0, lo = Infinity, hi = -Infinity;
      for (let j = 0; j < n; j++) {
        const d = data.offsets[i][j];
        const c = data.clipped ? data.clipped[i][j] : d;
        const sat = c !== d;
        if (sat) nsat++;
        lo = Math.min(lo, d); hi = Math.max(hi, d);
        const side = j < i ? 'left' : j > i ? 'right' : 'self';
        const b = el('button', {
          type: 'button', class: 'tok ' + side + (sat ? ' saturated' : ''), 'data-j': String(j),
          'aria-pressed': String(j === i),
          'aria-label': t('v1.tok_aria', { tok: data.tokens[j], j: j, d: fmtInt(d), clip: sat ? t('v1.clipped_to', { v: fmtInt(c) }) : '', side: t('v1.side_' + side) })
        },
        el('span', { class: 'tok-side', 'aria-hidden': 'true', text: side === 'left' ? '◀' : side === 'right' ? '▶' : '●' }),
        el('span', { class: 'tok-text', text: data.tokens[j] }),
        el('span', { class: 'tok-off', text: 'd = ' + fmtInt(d) }),
        el('span', { class: 'tok-clip', text: sat ? '→ ' + fmtInt(c) : '\u00a0' }));
        b.addEventListener('click', () => { sel = j; render(); });
        box.append(b);
      }
      if (focusIdx !== null) { const f = box.querySelector(`[data-j="${focusIdx}"]`); if (f) f.focus(); }
      $('#v1-readout').textContent = t('v1.readout', {
        i: i, tok: data.tokens[i], lo: fmtInt(lo), hi: fmtInt(hi), k: k === null ? '∞' : k, nsat: nsat,
        rows: k === null ? '—' : 2 * k + 1
      });
      // a compact table: j, d, clipped, table row
      const tbl = el('table', { class: 'mini' });
      const rows = [['v1.row_j', (j) => String(j)], ['v1.row_d', (j) => fmtInt(data.offsets[i][j])]];
      if (data.clipped) {
        rows.push(['v1.row_clip', (j) => fmtInt(data.clipped[i][j])]);
        rows.push(['v1.row_index', (j) => String(data.clipped[i][j] + k)]);
      }
      for (const [key, f] of rows) {
        const tr = el('tr', {}, el('th', { scope: 'row', text: t(key) }));
        for (let j = 0; j < n; j++) {
          const side = j < i ? 'left' : j > i ? 'right' : 'self';
          tr.append(el('td', { class: side, text: f(j) }));
        }
        tbl.append(tr);
      }
      $('#v1-table').replaceChildren(tbl);
    }
    function relabelConv() {
      $('#v1-conv').textContent = t(flip.checked ? 'v1.conv_ij' : 'v1.conv_ji');
    }

    text.addEventListener('input', loadSoon);
    flip.addEventListener('change', load);
    clip.addEventListener('input', () => { clipOut.value = clip.value; loadSoon(); });
    $('#v1-form').addEventListener('submit', (ev) => ev.preventDefault());
    if (SNAP) { text.readOnly = true; text.title = t('snapshot_readonly'); }
    return {
      show() { if (!loaded) { loaded = true; load(); } },
      relabel() { render(); },
      redraw() {}
    };
  })();

  // ================================================================ view 2

  const V2 = (function () {
    const run = latest();
    let data = null, loaded = false, entry = null;
    const scheme = $('#v2-scheme'), nIn = $('#v2-n'), causal = $('#v2-causal'), heads = $('#v2-heads');
    const head = $('#v2-head'), headDim = $('#v2-headdim'), seed = $('#v2-seed'), show = $('#v2-show');
    const optList = $('#v2-option-list'), textIn = $('#v2-text');
    const hm = Heatmap($('#v2-heatmap'), { onCell: cell, maxSize: 400 });
    const aux = Heatmap($('#v2-aux'), { onCell: auxCell, maxSize: 400 });  // CoPE p_ij, DeBERTa's table rows
    let userCausal = false;  // the switch's state before a causal-only scheme forced it on
    const isContent = () => !!entry && entry.kind === 'content';

    function fillSchemes() {
      scheme.replaceChildren();
      for (const e of state.info.bias_schemes) {
        const o = el('option', { value: e.key, disabled: !e.available },
          t('scheme.' + e.key) + (e.available ? '' : ' ' + t('v2.unavailable')));
        scheme.append(o);
      }
      const first = state.info.bias_schemes.find((e) => e.available);
      scheme.value = first ? first.key : '';
    }
    function fillHeads() {
      const H = clampInt(heads.value, 1, state.info.limits.max_heads, 4);
      const cur = clampInt(head.value, 0, H - 1, 0);
      head.replaceChildren();
      for (let h = 0; h < H; h++) head.append(el('option', { value: String(h) }, t('v2.head_n', { h: h + 1 })));
      head.value = String(Math.min(cur, H - 1));
    }
    function buildOptions() {
      entry = state.info.bias_schemes.find((e) => e.key === scheme.value) || null;
      optList.replaceChildren();
      if (!entry) return;
      $('#v2-head-controls').hidden = !entry.per_head;
      $('#v2-headdim-wrap').hidden = !entry.head_dim;
      $('#v2-show-wrap').hidden = entry.kind !== 'bucketed';
      // content-dependent schemes read a typed text instead of a length
      $('#v2-n-wrap').hidden = isContent();
      $('#v2-text-wrap').hidden = !isContent();
      if (entry.causal_only) {
        if (!causal.disabled) userCausal = causal.checked;
        causal.checked = true; causal.disabled = true;
      } else if (causal.disabled) {
        causal.disabled = false; causal.checked = userCausal;
      }
      for (const o of entry.options || []) {
        const id = 'v2-opt-' + o.name;
        const label = el('label', { for: id, 'data-key': 'opt.' + o.name }, has('opt.' + o.name) ? t('opt.' + o.name) : o.name);
        let input;
        if (o.type === 'bool') {
          input = el('input', { id, type: 'checkbox', 'data-opt': o.name, 'data-type': 'bool' });
          input.checked = !!o.default;
          optList.append(el('div', { class: 'switch-row' }, input, label));
        } else {
          input = el('input', { id, type: 'number', step: o.type === 'int' ? '1' : 'any', 'data-opt': o.name, 'data-type': o.type, value: String(o.default), inputmode: o.type === 'int' ? 'numeric' : 'decimal' });
          optList.append(label, input);
        }
        if (o.library_default !== undefined) {
          optList.append(el('p', { class: 'hint', 'data-lib': String(o.library_default), 'data-start': String(o.default) },
            t('v2.lib_default', { v: o.library_default, w: o.default })));
        }
        input.dataset.default = String(o.default);
        input.addEventListener(o.type === 'bool' ? 'change' : 'input', loadSoon);
      }
      for (const o of entry.overrides || []) {
        const id = 'v2-set-' + o.name;
        const label = el('label', { for: id, 'data-key': 'set.' + o.name }, t('set.' + o.name));
        const input = el('input', { id, type: 'number', step: 'any', min: String(o.min), max: String(o.max), 'data-set': o.name, placeholder: '—', inputmode: 'decimal' });
        input.addEventListener('input', loadSoon);
        optList.append(label, input);
      }
      $('#v2-options').hidden = !optList.childElementCount;
    }
    function params() {
      const p = { scheme: scheme.value, causal: causal.checked ? 'true' : 'false' };
      if (isContent()) p.text = textIn.value; else p.n = nIn.value;
      if (!entry) return p;
      if (entry.per_head) {
        p.n_heads = heads.value; p.head = head.value; p.seed = seed.value;
        if (entry.head_dim) p.head_dim = headDim.value;
      }
      if (entry.kind === 'bucketed') p.show = show.value;
      optList.querySelectorAll('[data-opt]').forEach((inp) => {
        const typ = inp.dataset.type;
        if (typ === 'bool') { if (String(inp.checked) !== inp.dataset.default) p['opt.' + inp.dataset.opt] = String(inp.checked); }
        else if (inp.value !== '' && Number(inp.value) !== Number(inp.dataset.default)) p['opt.' + inp.dataset.opt] = inp.value;
      });
      optList.querySelectorAll('[data-set]').forEach((inp) => { if (inp.value !== '') p['set.' + inp.dataset.set] = inp.value; });
      return p;
    }
    async function load() {
      if (!entry) return;
      try {
        const d = await run(() => api('bias', params()));
        if (d === undefined) return;
        showError('v2', null);
        data = d;
        render();
      } catch (err) { showError('v2', err); }
    }
    const loadSoon = debounce(load, 200);

    function valueName() { return t('v2.what.' + (data ? data.values : 'bias')); }
    function cell(i, j) {
      if (!data) return;
      const d = j - i;
      const out = $('#v2-readout');
      if (data.content) {
        const tk = { i, j, a: data.tokens[i], b: data.tokens[j] };
        if (data.causal && j > i) { out.textContent = t('v2.cell_content_masked', tk); return; }
        tk.v = fmtNum(data.matrix[i][j], 6);
        if (data.positions) { tk.p = fmtNum(data.positions[i][j], 5); out.textContent = t('v2.cell_cope', tk); }
        else out.textContent = t('v2.cell_content', tk);
        return;
      }
      if (data.causal && j > i) { out.textContent = t('v2.cell_masked', { i, j, d: fmtInt(d) }); return; }
      const v = data.matrix[i][j];
      const name = data.values === 'bucket' ? 'bucket' : data.values === 'norm' ? '‖aᴷ‖' : 'b';
      out.textContent = t('v2.cell', { i, j, d: fmtInt(d), name, v: data.values === 'bucket' ? fmtInt(v) : fmtNum(v, 6) });
    }
    function auxCell(i, j) {
      if (!data || !data.content) return;
      const out = $('#v2-aux-readout');
      const tk = { i, j, a: data.tokens[i], b: data.tokens[j] };
      if (data.causal && j > i) { out.textContent = t('v2.cell_content_masked', tk); return; }
      if (data.positions) out.textContent = t('v2.aux_cell_cope', Object.assign(tk, { p: fmtNum(data.positions[i][j], 5) }));
      else if (data.rel_index) out.textContent = t('v2.aux_cell_deberta', Object.assign(tk, { r: fmtInt(i - j), v: String(data.rel_index[i][j]) }));
    }
    // content-dependent schemes: the score for the typed text, and what drives it
    function renderContent() {
      const masked = data.causal ? (i, j) => j > i : null;
      const flat = [];
      data.matrix.forEach((r, i) => r.forEach((v, j) => { if (!(data.causal && j > i)) flat.push(v); }));
      hm.draw({ matrix: data.matrix, labels: data.tokens, scale: scaleFor(flat, 'diverging'), masked, unit: 'logit', aria: $('#v2-hm-cap').textContent });
      if (hm.cursor) cell(hm.cursor[0], hm.cursor[1]);
      const curve = $('#v2-curve'), auxWrap = $('#v2-aux-wrap'), gates = $('#v2-gates');
      $('#v2-buckets').replaceChildren();
      gates.replaceChildren();
      if (data.gates) {
        auxWrap.hidden = true; curve.hidden = false;
        const n = data.n, xs = Array.from({ length: n }, (_, k) => k);
        const series = [];
        data.gates.forEach((ys, h) => {
          if (h !== data.head) series.push({ label: t('v2.head_n', { h: h + 1 }), xs, ys, colour: OKABE[h % 8], width: 1, opacity: 0.4, dash: DASHES[h % 4] });
        });
        series.push({ label: t('v2.head_n', { h: data.head + 1 }), xs, ys: data.gates[data.head], colour: OKABE[data.head % 8], width: 3, marker: n <= 40 ? MARKERS[data.head % 4] : null });
        lineChart(curve, { series, xLabel: t('v2.gates_x'), yLabel: t('v2.gates_y'), xTicks: n <= 16 ? xs : null, yInclude: [0, 1], maxWidth: 500, height: 240, aria: $('#v2-curve-cap').textContent });
        const tbl = el('table', { class: 'mini', id: 'v2-gate-table' });
        const rows = [['v2.row_t', (k) => String(k)], ['v2.row_tok', (k) => data.tokens[k]],
          ['v2.row_gate', (k) => fmtNum(data.gates[data.head][k], 4)], ['v2.row_log', (k) => fmtNum(data.log_gates[data.head][k], 4)]];
        for (const [key, f] of rows) {
          const tr = el('tr', { 'data-row': key.slice(7) }, el('th', { scope: 'row', text: t(key, { h: data.head + 1 }) }));
          for (let k = 0; k < n; k++) tr.append(el('td', { text: f(k) }));
          tbl.append(tr);
        }
        gates.append(tbl);
      } else {
        curve.hidden = true; curve.replaceChildren(); auxWrap.hidden = false;
        const mat = data.positions || data.rel_index;
        const vals = [];
        mat.forEach((r, i) => r.forEach((v, j) => { if (!(data.causal && j > i)) vals.push(v); }));
        const sc = scaleFor(vals, 'sequential');
        if (data.positions) sc.lo = 0;
        aux.draw({ matrix: mat, labels: data.tokens, scale: sc, masked, unit: '', aria: $('#v2-curve-cap').textContent });
        if (aux.cursor) auxCell(aux.cursor[0], aux.cursor[1]);
      }
      const ps = $('#v2-params');
      ps.replaceChildren(el('p', { class: 'hint' }, t('v2.scale', { s: fmtNum(data.scale, 5), c: data.content_dim })));
      ps.append(el('p', { class: 'hint' }, data.learned_params > 0 ? t('v2.learned', { seed: data.seed, p: data.learned_params }) : t('v2.fixed')));
      if (data.paper) ps.append(el('p', { class: 'hint' }, t('v2.paper') + ': ', el('a', { href: data.paper, rel: 'noopener noreferrer', target: '_blank' }, data.paper)));
    }
    function render() {
      relabel();
      if (!data) return;
      if (data.content) { renderContent(); return; }
      $('#v2-curve').hidden = false; $('#v2-aux-wrap').hidden = true; $('#v2-gates').replaceChildren();
      const kind = data.values === 'bias' ? 'diverging' : (data.values === 'bucket' && data.matrix.some((r) => r.some((v) => v < 0)) ? 'diverging' : 'sequential');
      const flat = [];
      data.matrix.forEach((r, i) => r.forEach((v, j) => { if (!(data.causal && j > i)) flat.push(v); }));
      hm.draw({
        matrix: data.matrix, scale: scaleFor(flat, kind),
        masked: data.causal ? (i, j) => j > i : null,
        unit: data.values === 'bias' ? 'logit' : '',
        aria: $('#v2-hm-cap').textContent
      });
      if (hm.cursor) cell(hm.cursor[0], hm.cursor[1]);
      // curve
      const series = [];
      const stepped = data.values !== 'bias' || data.kind === 'bucketed';
      data.curves.forEach((ys, h) => {
        if (h === data.head) return;
        series.push({ label: t('v2.head_n', { h: h + 1 }), xs: data.offsets, ys, colour: OKABE[h % 8], width: 1, opacity: 0.4, dash: DASHES[h % 4], step: stepped });
      });
      const sel = data.curves.length > 1 ? data.head : 0;
      series.push({ label: t('v2.head_n', { h: sel + 1 }), xs: data.offsets, ys: data.curves[sel], colour: OKABE[sel % 8], width: 3, step: stepped, marker: data.offsets.length <= 40 ? MARKERS[sel % 4] : null });
      const vlines = [];
      if (data.buckets && data.buckets.length <= 96) {
        const bs = data.buckets;
        // mark where a bucket wider than one offset starts or ends (the exact range needs no lines)
        bs.forEach((b, k) => {
          if (k > 0 && (b.to > b.from || bs[k - 1].to > bs[k - 1].from)) vlines.push({ x: b.from - 0.5, colour: '#666', dash: '2 3' });
        });
      }
      if (data.k !== undefined && data.k < data.n) {
        // Shaw: offsets beyond +-k reuse the end rows of the table
        vlines.push({ x: -data.k - 0.5, colour: '#666', dash: '4 3', label: MINUS + 'k' });
        if (!data.causal) vlines.push({ x: data.k + 0.5, colour: '#666', dash: '4 3', label: 'k' });
      }
      lineChart($('#v2-curve'), { series, vlines, xLabel: t('v2.x'), yLabel: t('v2.y.' + data.values), maxWidth: 500, height: 280, aria: $('#v2-curve-cap').textContent });
      // parameters
      const ps = $('#v2-params');
      ps.replaceChildren();
      if (data.slopes) ps.append(el('p', {}, t('v2.slopes', { v: data.slopes.map((v) => fmtNum(v, 4)).join(', ') })));
      if (data.r1) ps.append(el('p', {}, t('v2.r1r2', { r1: data.r1.map((v) => fmtNum(v, 4)).join(', '), r2: data.r2.map((v) => fmtNum(v, 4)).join(', ') })));
      if (data.learned_params !== undefined) ps.append(el('p', { class: 'hint' }, data.learned_params > 0 ? t('v2.learned', { seed: data.seed, p: data.learned_params }) : t('v2.fixed')));
      if (data.paper) ps.append(el('p', { class: 'hint' }, t('v2.paper') + ': ', el('a', { href: data.paper, rel: 'noopener noreferrer', target: '_blank' }, data.paper)));
      // bucket table
      const bt = $('#v2-buckets');
      bt.replaceChildren();
      if (data.buckets) {
        const tbl = el('table', { class: 'mini' },
          el('caption', {}, t('v2.buckets')),
          el('tr', {}, el('th', { scope: 'col' }, t('v2.bucket')), el('th', { scope: 'col' }, t('v2.range')), el('th', { scope: 'col' }, t('v2.width'))));
        for (const b of data.buckets) {
          tbl.append(el('tr', {}, el('td', {}, fmtInt(b.bucket)), el('td', {}, b.from === b.to ? fmtInt(b.from) : fmtInt(b.from) + ' … ' + fmtInt(b.to)), el('td', {}, String(b.to - b.from + 1))));
        }
        bt.append(el('div', { class: 'scroll short' }, tbl));
      }
    }
    function relabel() {
      const key = scheme.value;
      $('#v2-scheme-text').textContent = t('x.' + key);
      $('#v2-formula').textContent = t('f.' + key);
      const note = $('#v2-content-note');
      note.hidden = !isContent();
      note.textContent = isContent() ? t('v2.content_note', { seed: clampInt(seed.value, 0, 2147483647, 0) }) : '';
      optList.querySelectorAll('p[data-lib]').forEach((x) => { x.textContent = t('v2.lib_default', { v: x.dataset.lib, w: x.dataset.start }); });
      scheme.querySelectorAll('option').forEach((o) => {
        const e = state.info.bias_schemes.find((x) => x.key === o.value);
        o.textContent = t('scheme.' + o.value) + (e && !e.available ? ' ' + t('v2.unavailable') : '');
      });
      head.querySelectorAll('option').forEach((o) => { o.textContent = t('v2.head_n', { h: Number(o.value) + 1 }); });
      optList.querySelectorAll('label[data-key]').forEach((l) => { const k = l.dataset.key; if (has(k)) l.textContent = t(k); });
      if (data) {
        const what = valueName();
        $('#v2-hm-cap').textContent = (data.curves && data.curves.length > 1) || data.content || (entry && entry.per_head)
          ? t('v2.hm_cap', { what, h: data.head + 1, n: data.n }) : t('v2.hm_cap_nohead', { what, n: data.n });
        let cap;
        if (data.gates) cap = t('v2.gates_cap', { h: data.head + 1 });
        else if (data.positions) cap = t('v2.aux_cope', { h: data.head + 1, cap: data.npos_max - 1 });
        else if (data.rel_index) cap = t('v2.aux_deberta', { s: data.span });
        else cap = data.curve_row !== undefined ? t('v2.curve_row', { what, i: data.curve_row }) : t('v2.curve_cap', { what });
        $('#v2-curve-cap').textContent = cap;
      }
    }
    function init() {
      fillSchemes(); fillHeads(); buildOptions();
      nIn.max = String(state.info.limits.max_len);
      heads.max = String(state.info.limits.max_heads);
      scheme.addEventListener('change', () => { buildOptions(); relabel(); load(); });
      heads.addEventListener('input', () => { fillHeads(); loadSoon(); });
      [nIn, headDim, seed, textIn].forEach((x) => x.addEventListener('input', loadSoon));
      [causal, head, show].forEach((x) => x.addEventListener('change', load));
      causal.addEventListener('change', () => { if (!causal.disabled) userCausal = causal.checked; });
      textIn.maxLength = state.info.limits.max_text_chars;
      if (SNAP) { textIn.readOnly = true; textIn.title = t('snapshot_readonly'); }
      $('#v2-form').addEventListener('submit', (ev) => ev.preventDefault());
    }
    return {
      show() { if (!loaded) { loaded = true; init(); load(); } else if (data) render(); },
      relabel() { if (loaded) render(); },
      redraw() { if (loaded && data) render(); }
    };
  })();

  // ================================================================ view 3

  const V3 = (function () {
    const run = latest();
    let data = null, loaded = false;
    const abs = $('#v3-abs'), rel = $('#v3-rel'), c = $('#v3-c'), cNum = $('#v3-c-num'), nIn = $('#v3-n'), head = $('#v3-head'), seed = $('#v3-seed');
    const maps = {};

    function init() {
      const av = state.info.schemes.filter((s) => s.available);
      for (const [sel, want] of [[abs, false], [rel, true]]) {
        sel.replaceChildren();
        for (const s of av.filter((x) => x.relative === want)) sel.append(el('option', { value: s.name }, s.name));
      }
      abs.value = state.info.shift_defaults.absolute;
      rel.value = state.info.shift_defaults.relative;
      head.replaceChildren(el('option', { value: '0' }, '1'), el('option', { value: '1' }, '2'));
      cNum.max = String(state.info.limits.max_shift);
      nIn.max = String(state.info.limits.max_shift_len);
      [abs, rel, head].forEach((x) => x.addEventListener('change', load));
      c.addEventListener('input', () => { cNum.value = c.value; loadSoon(); });
      cNum.addEventListener('input', () => { if (Number(cNum.value) <= Number(c.max)) c.value = cNum.value; loadSoon(); });
      [nIn, seed].forEach((x) => x.addEventListener('input', loadSoon));
      $('#v3-form').addEventListener('submit', (ev) => ev.preventDefault());
    }
    function params() {
      return { absolute: abs.value, relative: rel.value, n: nIn.value, c: cNum.value, seed: seed.value, head: head.value };
    }
    async function load() {
      try {
        const d = await run(() => api('shift', params()));
        if (d === undefined) return;
        showError('v3', null);
        data = d;
        render();
      } catch (err) { showError('v3', err); }
    }
    const loadSoon = debounce(load, 200);

    function render() {
      if (!data) return;
      const host = $('#v3-rows');
      const keep = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.key : null;
      host.replaceChildren();
      // one colour scale for both difference maps, so "unchanged" looks white next to "changed"
      const dsc = scaleFor([].concat(...data.absolute.diff, ...data.relative.diff), 'diverging');
      for (const slot of ['absolute', 'relative']) {
        const r = data[slot];
        const row = el('div', { class: 'shift-row', 'data-slot': slot });
        const isSame = r.unchanged === true;
        row.append(el('h3', {}, r.scheme + ' · ' + t(r.relative ? 'v3.kind_rel' : 'v3.kind_abs')));
        const verdict = el('p', { class: 'verdict ' + (isSame ? 'same' : 'changed'), id: 'v3-verdict-' + slot },
          (isSame ? '= ' : '≠ ') + t(isSame ? 'v3.same' : 'v3.changed', { v: fmtNum(r.max_abs_diff, 3), tol: fmtNum(r.tolerance, 2) }));
        row.append(verdict);
        const grid = el('div', { class: 'triple' });
        const flat = [].concat(...r.base, ...r.shifted);
        const sc = scaleFor(flat, 'diverging');
        const readout = el('p', { class: 'readout', 'aria-live': 'polite', id: 'v3-readout-' + slot });
        const e = data.n - 1;
        const panels = [
          ['base', t('v3.base', { e: e }), r.base, sc],
          ['shifted', t('v3.shifted', { c: data.c, e: data.c + e }), r.shifted, sc],
          ['diff', t('v3.diff'), r.diff, dsc]
        ];
        const hms = [];
        for (const [key, cap, mat, scale] of panels) {
          const fig = el('figure', { class: 'fig small' }, el('figcaption', {}, cap));
          const box = el('div', { class: 'hm-host' });
          fig.append(box); grid.append(fig);
          const h = Heatmap(box, {
            maxSize: 170, onCell: (i, j) => {
              readout.textContent = t('v3.cell', { i, j, a: fmtNum(r.base[i][j], 5), b: fmtNum(r.shifted[i][j], 5), d: fmtNum(r.diff[i][j], 3) });
            }
          });
          h.canvas.dataset.key = slot + '-' + key;
          hms.push([h, mat, scale, cap]);
        }
        row.append(grid, readout);
        host.append(row);
        for (const [h, mat, scale, cap] of hms) h.draw({ matrix: mat, scale: scale, unit: 'logit', aria: r.scheme + ': ' + cap });
        maps[slot] = hms.map((x) => x[0]);
      }
      if (keep) { const f = host.querySelector(`[data-key="${keep}"]`); if (f) f.focus(); }
    }
    return {
      show() { if (!loaded) { loaded = true; init(); load(); } else if (data) render(); },
      relabel() { if (loaded) render(); },
      redraw() { if (loaded && data) render(); }
    };
  })();

  // ================================================================ view 4

  const V4 = (function () {
    const run = latest();
    let data = null, loaded = false, uploaded = null;
    const hidden = new Set();  // series labels switched off in the legend
    const source = $('#v4-source'), file = $('#v4-file'), task = $('#v4-task'), metric = $('#v4-metric');

    function init() {
      source.replaceChildren();
      for (const r of state.info.results) source.append(el('option', { value: String(r.index) }, r.label));
      if (!state.info.results.length) source.append(el('option', { value: '', disabled: true }, '—'));
      source.disabled = !state.info.results.length;
      if (SNAP) $('#v4-upload-wrap').hidden = true;
      source.addEventListener('change', () => { uploaded = null; task.value = ''; metric.value = ''; load(true); });
      task.addEventListener('change', () => { metric.value = ''; load(false); });
      metric.addEventListener('change', () => load(false));
      file.addEventListener('change', onFile);
      $('#v4-form').addEventListener('submit', (ev) => ev.preventDefault());
    }
    async function onFile() {
      const f = file.files && file.files[0];
      if (!f) return;
      const lim = state.info.limits.max_body_bytes;
      if (f.size > lim) { showError('v4', new ApiFailure({ error: f.name + ': ' + f.size + ' bytes', code: 'too_large', limit: lim, unit: 'bytes' })); return; }
      uploaded = await f.text();
      task.value = ''; metric.value = '';
      load(true);
    }
    async function load(fresh) {
      const p = {};
      if (!fresh && task.value) p.task = task.value;
      if (!fresh && metric.value) p.metric = metric.value;
      try {
        let d;
        if (uploaded !== null) d = await run(() => api('results', p, uploaded));
        else {
          if (!state.info.results.length) { data = null; render(); return; }
          p.source = source.value || '0';
          d = await run(() => api('results', p));
        }
        if (d === undefined) return;
        showError('v4', null);
        data = d;
        render();
      } catch (err) { showError('v4', err); }
    }
    function fillSelect(sel, values, cur, labeller) {
      sel.replaceChildren();
      for (const v of values) sel.append(el('option', { value: v }, labeller ? labeller(v) : v));
      if (values.includes(cur)) sel.value = cur;
    }
    function render() {
      if (!data) {
        $('#v4-chart').replaceChildren(el('p', { class: 'hint' }, t('v4.none')));
        $('#v4-cap').textContent = ''; $('#v4-legend').replaceChildren(); $('#v4-table').replaceChildren();
        $('#v4-metric-hint').textContent = '';
        return;
      }
      fillSelect(task, data.tasks, data.task);
      fillSelect(metric, data.metrics.length ? data.metrics : [data.metric], data.metric, (m) => t('metric.' + m));
      const src = data.source === 'upload' ? t('v4.upload') : data.source;
      $('#v4-cap').textContent = t('v4.cap', { metric: t('metric.' + data.metric), task: data.task, src });
      const series = data.series.map((s, k) => ({
        label: s.label, xs: s.points.map((p) => p.eval_len), ys: s.points.map((p) => p.mean),
        band: s.seeds > 1 ? [s.points.map((p) => p.min), s.points.map((p) => p.max)] : null,
        colour: OKABE[k % 8], dash: DASHES[Math.floor(k / 8) % 4 + (k % 2 ? 0 : 0)], marker: MARKERS[k % 4], width: 2.2
      }));
      const lens = Array.from(new Set([].concat(...data.series.map((s) => s.points.map((p) => p.eval_len))))).sort((a, b) => a - b);
      const vlines = data.train_lens.map((n) => ({ x: n, label: t('v4.train', { n }), dash: '6 4', colour: '#333', width: 1.5 }));
      lineChart($('#v4-chart'), {
        series: series.filter((s) => !hidden.has(s.label)), vlines, xLog: true, xTicks: lens.length <= 12 ? lens : null, xLabel: t('v4.x'),
        yLabel: t('metric.' + data.metric), maxWidth: 760, height: 360, aria: $('#v4-cap').textContent
      });
      const leg = $('#v4-legend');
      leg.replaceChildren();
      series.forEach((s) => {
        const sw = svg('svg', { width: 34, height: 12, 'aria-hidden': 'true' },
          svg('line', { x1: 0, x2: 34, y1: 6, y2: 6, stroke: s.colour, 'stroke-width': 2.2, 'stroke-dasharray': s.dash || null }),
          marker(s.marker, 17, 6, s.colour));
        const on = !hidden.has(s.label);
        const b = el('button', { type: 'button', class: 'series-toggle', 'aria-pressed': String(on), title: t('v4.toggle') }, sw, ' ' + s.label);
        b.addEventListener('click', () => {
          if (hidden.has(s.label)) hidden.delete(s.label); else hidden.add(s.label);
          render();
          const again = leg.querySelectorAll('button')[series.indexOf(s)];
          if (again) again.focus();
        });
        leg.append(el('li', {}, b));
      });
      const tbl = el('table', { class: 'mini data', id: 'v4-numbers' },
        el('tr', {}, ...['v4.col_series', 'v4.col_len', 'v4.col_mean', 'v4.col_min', 'v4.col_max', 'v4.col_n'].map((k) => el('th', { scope: 'col' }, t(k)))));
      for (const s of data.series) for (const p of s.points) {
        tbl.append(el('tr', {}, el('td', {}, s.label), el('td', {}, String(p.eval_len)), el('td', {}, fmtNum(p.mean, 5)),
          el('td', {}, fmtNum(p.min, 5)), el('td', {}, fmtNum(p.max, 5)), el('td', {}, String(p.n))));
      }
      $('#v4-table').replaceChildren(tbl);
    }
    return {
      show() { if (!loaded) { loaded = true; init(); load(true); } else render(); },
      relabel() { if (loaded) render(); },
      redraw() { if (loaded) render(); }
    };
  })();

  // ================================================================ view 5

  const V5 = (function () {
    const run = latest();
    let data = null, loaded = false;
    const ckpt = $('#v5-ckpt'), text = $('#v5-text'), layer = $('#v5-layer'), head = $('#v5-head');
    const hm = Heatmap($('#v5-heatmap'), { onCell: cell, maxSize: 460 });

    function init() {
      ckpt.replaceChildren();
      for (const c of state.info.checkpoints) ckpt.append(el('option', { value: String(c.index) }, c.label));
      if (!state.info.checkpoints.length) ckpt.append(el('option', { value: '', disabled: true }, '—'));
      ckpt.disabled = !state.info.checkpoints.length;
      ckpt.addEventListener('change', () => { fillLayers(); load(); });
      layer.addEventListener('change', load);
      head.addEventListener('change', render);
      text.addEventListener('input', loadSoon);
      text.maxLength = state.info.limits.max_text_chars;
      if (SNAP) { text.readOnly = true; text.title = t('snapshot_readonly'); }
      $('#v5-form').addEventListener('submit', (ev) => ev.preventDefault());
      fillLayers();
    }
    function current() { return state.info.checkpoints[Number(ckpt.value)] || null; }
    function fillLayers() {
      const c = current();
      layer.replaceChildren(); head.replaceChildren();
      if (!c) return;
      for (let l = 0; l < c.n_layers; l++) layer.append(el('option', { value: String(l) }, t('layer_n', { l: l + 1 })));
      for (let h = 0; h < c.n_heads; h++) head.append(el('option', { value: String(h) }, t('v2.head_n', { h: h + 1 })));
      $('#v5-ckpt-info').textContent = t('v5.ckpt_info', { scheme: c.scheme, layers: c.n_layers, heads: c.n_heads, max: c.max_len });
    }
    async function load() {
      const c = current();
      if (!c) { showError('v5', new ApiFailure({ error: t('v5.none') })); return; }
      try {
        const d = await run(() => api('attention', { checkpoint: ckpt.value, text: text.value, layer: layer.value || '0' }));
        if (d === undefined) return;
        showError('v5', null);
        data = d;
        render();
      } catch (err) { showError('v5', err); }
    }
    const loadSoon = debounce(load, 250);
    // top of the colour scale: the largest probability outside the first row
    // (in a causal model query 0 can only attend to itself, so its p is always 1)
    function topOf(mat) {
      let top = 0;
      mat.forEach((r, i) => r.forEach((v, j) => {
        if ((data.causal && (j > i || i === 0)) || v === null) return;
        if (v > top) top = v;
      }));
      return top || 1;
    }
    function cell(i, j) {
      if (!data) return;
      const p = data.maps[Number(head.value) || 0][i][j];
      $('#v5-readout').textContent = t('v5.cell', { i, j, a: data.tokens[i], b: data.tokens[j], p: data.causal && j > i ? '0 (masked)' : fmtNum(p, 4) });
    }
    function render() {
      if (!data) return;
      const h = Number(head.value) || 0;
      $('#v5-cap').textContent = t('v5.cap', { l: data.layer + 1, h: h + 1, n: data.tokens.length });
      const top = topOf(data.maps[h]);
      hm.draw({ matrix: data.maps[h], labels: data.tokens, scale: { kind: 'sequential', lo: 0, hi: top || 1 }, masked: data.causal ? (i, j) => j > i : null, aria: $('#v5-cap').textContent });
      if (hm.cursor) cell(hm.cursor[0], hm.cursor[1]);
      const thumbs = $('#v5-thumbs');
      thumbs.replaceChildren();
      data.maps.forEach((m, k) => {
        const b = el('button', { type: 'button', class: 'thumb', 'aria-pressed': String(k === h), 'data-head': String(k) });
        const cv = el('canvas', { 'aria-hidden': 'true' });
        const mx = topOf(m);
        const n = m.length, px = Math.max(1, Math.floor(96 / n)), S = px * n;
        cv.width = S; cv.height = S; cv.style.width = S + 'px'; cv.style.height = S + 'px';
        const ctx = cv.getContext('2d');
        for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) {
          ctx.fillStyle = data.causal && j > i ? '#d4d4d4' : rgbCss(colourOf(m[i][j], { kind: 'sequential', lo: 0, hi: mx || 1 }));
          ctx.fillRect(j * px, i * px, px, px);
        }
        b.append(cv, el('span', {}, t('v5.thumb', { h: k + 1 })));
        b.addEventListener('click', () => { head.value = String(k); render(); });
        thumbs.append(b);
      });
    }
    return {
      show() { if (!loaded) { loaded = true; init(); if (state.info.checkpoints.length) load(); else showError('v5', new ApiFailure({ error: t('v5.none') })); } else render(); },
      relabel() {
        if (!loaded) return;
        if (!state.info.checkpoints.length) showError('v5', new ApiFailure({ error: t('v5.none') }));
        const c = current();
        if (c) {
          layer.querySelectorAll('option').forEach((o) => { o.textContent = t('layer_n', { l: Number(o.value) + 1 }); });
          head.querySelectorAll('option').forEach((o) => { o.textContent = t('v2.head_n', { h: Number(o.value) + 1 }); });
          $('#v5-ckpt-info').textContent = t('v5.ckpt_info', { scheme: c.scheme, layers: c.n_layers, heads: c.n_heads, max: c.max_len });
        }
        render();
      },
      redraw() { if (loaded) render(); }
    };
  })();

  const VIEWS = { offsets: V1, bias: V2, shift: V3, extrap: V4, attn: V5 };

  // ------------------------------------------------------------------ boot

  async function boot() {
    let saved = null;
    try { saved = window.localStorage.getItem('relpos-lang'); } catch (e) { saved = null; }
    const fromUrl = new URLSearchParams(location.search).get('lang');
    state.lang = fromUrl === 'zh' || fromUrl === 'en' ? fromUrl : (saved || ((navigator.language || '').startsWith('zh') ? 'zh' : 'en'));
    document.querySelectorAll('.lang button').forEach((b) => b.addEventListener('click', () => {
      state.lang = b.dataset.lang;
      try { window.localStorage.setItem('relpos-lang', state.lang); } catch (e) { /* storage may be off */ }
      applyLang();
    }));
    initTabs();
    try {
      state.info = await api('info', {});
    } catch (err) {
      const box = el('p', { class: 'error', role: 'alert' }, errorText(err));
      $('#main').prepend(box);
      return;
    }
    applyLang();
    showView((location.hash || '#offsets').slice(1));
    window.addEventListener('hashchange', () => showView((location.hash || '#offsets').slice(1)));
    window.addEventListener('resize', debounce(() => { const v = VIEWS[state.view]; if (v.redraw) v.redraw(); }, 150));
    document.body.dataset.ready = 'true';
  }
  boot();
})();
