/**
 * Writes charts/crd-migrator/README.md: the chart's description (Chart.yaml), how to
 * install it, and a table of every value documented in values.yaml, the way helm-docs
 * reads it: a comment block starting `# --` right above a key describes that key (dotted
 * path), its default is the key's value in values.yaml. Values without such a comment
 * (e.g. the children of a documented map) are not listed on their own.
 *
 *   npm run chart-docs            rewrite the README
 *   npm run chart-docs -- --check exit 1 when the README is out of date
 *
 * Self-contained (node: modules and `yaml` only), so Node runs this file as it is (type
 * stripping), without a build. test/unit/chart-docs.test.ts keeps the committed README equal
 * to what this renders.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parse } from 'yaml'

export interface ValueDoc {
  /** Dotted path, e.g. migrator.concurrency. */
  key: string
  /** The comment, its lines joined. */
  description: string
  /** The default, as values.yaml has it. */
  value: unknown
}

const KEY_LINE = /^(\s*)([A-Za-z0-9_.-]+|"[^"]+"|'[^']+'):(?:\s|$)/
const COMMENT_LINE = /^\s*#\s?(.*)$/
const DOC_START = /^--\s*/

/** The documented values of a values.yaml text, in file order. */
export function valueDocs(valuesYaml: string): ValueDoc[] {
  const values = parse(valuesYaml) as Record<string, unknown>
  const docs: ValueDoc[] = []
  /** Keys that enclose the current line: [indent, name]. */
  const parents: Array<{ indent: number; name: string }> = []
  let comment: string[] | undefined
  for (const line of valuesYaml.split('\n')) {
    const commentLine = COMMENT_LINE.exec(line)
    if (commentLine) {
      const text = commentLine[1]!
      if (DOC_START.test(text)) comment = [text.replace(DOC_START, '')]
      else if (comment) comment.push(text)
      continue
    }
    const keyLine = KEY_LINE.exec(line)
    if (!keyLine) {
      // A blank line or a list item ends a comment block: it describes no key.
      if (line.trim() === '' || line.trimStart().startsWith('-')) comment = undefined
      continue
    }
    const indent = keyLine[1]!.length
    const name = keyLine[2]!.replace(/^["']|["']$/g, '')
    while (parents.length > 0 && parents.at(-1)!.indent >= indent) parents.pop()
    const keyPath = [...parents.map((p) => p.name), name]
    if (comment) docs.push({ key: keyPath.join('.'), description: paragraph(comment), value: valueAt(values, keyPath) })
    comment = undefined
    parents.push({ indent, name })
  }
  return docs
}

/** Comment lines as one paragraph; an empty comment line is a line break in the table. */
function paragraph(lines: string[]): string {
  return lines
    .map((l) => l.trim())
    .join('\n')
    .trim()
    .split(/\n\n+/)
    .map((p) => p.replace(/\n/g, ' '))
    .join('<br>')
}

function valueAt(values: Record<string, unknown>, keyPath: string[]): unknown {
  let v: unknown = values
  for (const k of keyPath) v = v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined
  return v
}

/**
 * Text for a Markdown table cell: pipes escaped, on one line, and outside `code` spans the
 * angle brackets too (`<namespace>` is a placeholder, not an HTML tag).
 */
export function cell(s: string): string {
  return s
    .replace(/\n/g, ' ')
    .split(/(`[^`]*`)/)
    .map((part) => (part.startsWith('`') ? part : part.replace(/</g, '&lt;').replace(/>/g, '&gt;')))
    .join('')
    .replace(/\|/g, '\\|')
}

function formatDefault(value: unknown): string {
  if (value === undefined) return ''
  return `\`${JSON.stringify(value).replace(/\|/g, '\\|')}\``
}

function typeOf(value: unknown): string {
  if (Array.isArray(value)) return 'list'
  if (value === null) return 'null'
  if (typeof value === 'object') return 'object'
  if (typeof value === 'number') return Number.isInteger(value) ? 'int' : 'float'
  return typeof value
}

interface ChartYaml {
  name: string
  description: string
  version: string
  appVersion: string
  kubeVersion?: string
}

export function renderChartReadme(chartYaml: string, valuesYaml: string): string {
  const chart = parse(chartYaml) as ChartYaml
  const rows = valueDocs(valuesYaml).map(
    (d) => `| \`${d.key}\` | ${typeOf(d.value)} | ${formatDefault(d.value)} | ${cell(d.description)} |`,
  )
  return [
    `# ${chart.name}`,
    '',
    `<!-- Generated from Chart.yaml and values.yaml by \`npm run chart-docs\` (dev/chart-docs.ts): edit those, not this file. -->`,
    '',
    chart.description.trim(),
    '',
    `Chart version ${chart.version}, app version ${chart.appVersion}${chart.kubeVersion ? `, Kubernetes \`${chart.kubeVersion}\`` : ''}.`,
    '',
    '## Installing',
    '',
    'Build and push the image first (no image is published), then:',
    '',
    '```sh',
    `helm install ${chart.name} charts/${chart.name} -n ${chart.name} --create-namespace \\`,
    `  --set image.repository=registry.example.com/${chart.name} \\`,
    "  --set 'rbac.managedGroups={example.com}'",
    '```',
    '',
    "The project's [install and upgrade](../../docs/install.md) page explains what the chart installs, the main",
    'values, the `helm test` hook and the alerts, and how to uninstall safely; how a migration runs:',
    '[migrate one CRD](../../docs/migrate-one-crd.md); every metric: [metrics](../../docs/reference/metrics.md).',
    '',
    '## Values',
    '',
    '| Key | Type | Default | Description |',
    '|-----|------|---------|-------------|',
    ...rows,
    '',
  ].join('\n')
}

export const CHART_DIR = fileURLToPath(new URL('../charts/crd-migrator/', import.meta.url))

export function chartReadme(chartDir = CHART_DIR): { file: string; expected: string } {
  const read = (f: string) => readFileSync(path.join(chartDir, f), 'utf8')
  return { file: path.join(chartDir, 'README.md'), expected: renderChartReadme(read('Chart.yaml'), read('values.yaml')) }
}

function main(args: string[]): number {
  const { file, expected } = chartReadme()
  let current = ''
  try {
    current = readFileSync(file, 'utf8')
  } catch {
    // first run
  }
  if (args.includes('--check')) {
    if (current === expected) return 0
    process.stderr.write(`${file} is out of date: run npm run chart-docs\n`)
    return 1
  }
  if (current !== expected) writeFileSync(file, expected)
  process.stdout.write(`${current === expected ? 'up to date' : 'wrote'} ${path.relative(process.cwd(), file)}\n`)
  return 0
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) process.exitCode = main(process.argv.slice(2))
