/**
 * The metric names a PromQL expression selects, and the label matchers it puts on them,
 * for checking dashboards and alerts against the metrics the code exports. Not a PromQL
 * parser: it strips what cannot be a metric name (strings, label matchers, ranges,
 * grouping labels, numbers, durations) and then every identifier left must be a function,
 * an aggregation, a keyword, or a metric. So a misspelt function fails as loudly as a
 * misspelt metric.
 */

/** PromQL functions (Prometheus 3.x) and aggregation operators. */
const FUNCTIONS = new Set([
  'abs',
  'absent',
  'absent_over_time',
  'acos',
  'acosh',
  'asin',
  'asinh',
  'atan',
  'atanh',
  'avg_over_time',
  'ceil',
  'changes',
  'clamp',
  'clamp_max',
  'clamp_min',
  'cos',
  'cosh',
  'count_over_time',
  'day_of_month',
  'day_of_week',
  'day_of_year',
  'days_in_month',
  'deg',
  'delta',
  'deriv',
  'double_exponential_smoothing',
  'exp',
  'floor',
  'histogram_avg',
  'histogram_count',
  'histogram_fraction',
  'histogram_quantile',
  'histogram_stddev',
  'histogram_stdvar',
  'histogram_sum',
  'hour',
  'idelta',
  'increase',
  'irate',
  'label_join',
  'label_replace',
  'last_over_time',
  'ln',
  'log10',
  'log2',
  'mad_over_time',
  'max_over_time',
  'min_over_time',
  'minute',
  'month',
  'predict_linear',
  'present_over_time',
  'quantile_over_time',
  'rad',
  'rate',
  'resets',
  'round',
  'scalar',
  'sgn',
  'sin',
  'sinh',
  'sort',
  'sort_by_label',
  'sort_by_label_desc',
  'sort_desc',
  'sqrt',
  'stddev_over_time',
  'stdvar_over_time',
  'sum_over_time',
  'tan',
  'tanh',
  'time',
  'timestamp',
  'vector',
  'year',
  // aggregation operators
  'avg',
  'bottomk',
  'count',
  'count_values',
  'group',
  'limit_ratio',
  'limitk',
  'max',
  'min',
  'quantile',
  'stddev',
  'stdvar',
  'sum',
  'topk',
])

/** Keywords and literals that are not followed by "(" when used. */
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'atan2', 'start', 'end', 'Inf', 'NaN', 'inf', 'nan'])
/** Keywords followed by a parenthesised list of labels. */
const GROUPING = ['by', 'without', 'on', 'ignoring', 'group_left', 'group_right']

export interface Selector {
  metric: string
  /** Label names of the matchers in {...} right after the metric name. */
  labels: string[]
}

/** Grafana's interval variables stand for durations; other $variables only go in label values. */
function withoutGrafanaIntervals(expr: string): string {
  return expr.replace(/\$__(rate_interval|interval|range)\b/g, '5m')
}

const STRING = /"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g

function checkBalanced(expr: string): void {
  const pairs: Record<string, string> = { ')': '(', ']': '[', '}': '{' }
  const stack: string[] = []
  for (const c of expr.replace(STRING, '""')) {
    if (c === '(' || c === '[' || c === '{') stack.push(c)
    else if (c in pairs && stack.pop() !== pairs[c]) throw new Error(`unbalanced ${c} in: ${expr}`)
  }
  if (stack.length > 0) throw new Error(`unclosed ${stack.join('')} in: ${expr}`)
}

/**
 * The selectors of `expr`, in order. Throws on an unknown function, unbalanced brackets, or
 * a $variable outside a label value.
 */
export function selectorsIn(expr: string): Selector[] {
  checkBalanced(expr)
  const labelsOf = new Map<number, string[]>()
  let s = withoutGrafanaIntervals(expr)
  // Label matchers, remembered by position (same length), then blanked with their strings.
  s = s.replace(/\{([^{}]*)\}/g, (whole: string, inner: string, at: number) => {
    const names = [...inner.replace(STRING, '""').matchAll(/([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)/g)].map((m) => m[1]!)
    labelsOf.set(at, names)
    return '{' + ' '.repeat(whole.length - 2) + '}'
  })
  s = s.replace(STRING, (m) => ' '.repeat(m.length))
  if (s.includes('$')) throw new Error(`a $variable outside a label value in: ${expr}`)
  s = s.replace(/\[[^\]]*\]/g, (m) => ' '.repeat(m.length))
  s = s.replace(new RegExp(`\\b(${GROUPING.join('|')})\\s*\\([^()]*\\)`, 'g'), (m) => ' '.repeat(m.length))
  const selectors: Selector[] = []
  // Identifiers not glued to a number (5m, 1e3) or a dot.
  for (const m of s.matchAll(/(?<![\w:.])[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const name = m[0]
    // Keywords first: `or (...)` is an operator, not a call.
    if (KEYWORDS.has(name) || GROUPING.includes(name)) continue
    const after = s.slice(m.index + name.length).trimStart()
    if (after.startsWith('(')) {
      if (!FUNCTIONS.has(name)) throw new Error(`unknown PromQL function ${name}() in: ${expr}`)
      continue
    }
    const brace = s.indexOf('{', m.index + name.length)
    const glued = brace >= 0 && s.slice(m.index + name.length, brace).trim() === ''
    selectors.push({ metric: name, labels: glued ? (labelsOf.get(brace) ?? []) : [] })
  }
  return selectors
}

/**
 * Grafana's label_values(metric{...}, label) and label_values(label) of a templating
 * query: the selectors inside it.
 */
export function selectorsInTemplateQuery(query: string): Selector[] {
  const m = /^label_values\((.*)\)$/.exec(query.trim())
  if (!m) throw new Error(`not a label_values() query: ${query}`)
  const comma = m[1]!.lastIndexOf(',')
  return comma < 0 ? [] : selectorsIn(m[1]!.slice(0, comma))
}
