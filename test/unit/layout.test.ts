/**
 * The split between the product (src/, built into dist/, shipped) and the development
 * tooling (dev/, built into dist-dev/, never shipped), read from the import statements:
 * - src/ imports nothing outside src/ (no dev/, no test/), and of npm packages only its
 *   production dependencies, every one of which it uses;
 * - dev/ and test/ import the product by relative paths into src/, never a build output
 *   (dist/, dist-dev/) or the package by name, so no process loads two copies of a product
 *   module (KubeApiError's instanceof checks depend on it).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { builtinModules } from 'node:module'
import { dirname, join, relative, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import ts from 'typescript'

const root = fileURLToPath(new URL('../../', import.meta.url))
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  name: string
  dependencies: Record<string, string>
}

function tsFiles(dir: string): string[] {
  const out: string[] = []
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name)
    if (entry.isDirectory()) out.push(...tsFiles(p))
    else if (entry.name.endsWith('.ts')) out.push(p)
  }
  return out
}

/** Module specifiers of a file: static imports, `export ... from`, and literal `import()`. */
function specifiers(file: string): string[] {
  return ts.preProcessFile(readFileSync(file, 'utf8'), true, true).importedFiles.map((f) => f.fileName)
}

/** `@scope/name` or `name` of a bare specifier. */
const packageName = (spec: string) =>
  spec
    .split('/')
    .slice(0, spec.startsWith('@') ? 2 : 1)
    .join('/')
const isBuiltin = (spec: string) => spec.startsWith('node:') || builtinModules.includes(spec.split('/')[0]!)
const isInside = (dir: string, path: string) => path === dir || path.startsWith(dir + sep)
const rel = (p: string) => relative(root, p).split(sep).join('/')

const src = join(root, 'src')
const dev = join(root, 'dev')
const test = join(root, 'test')

t.test('src/ imports nothing outside src/, and no npm package but its production dependencies', async (t) => {
  const files = tsFiles(src)
  t.ok(files.length > 30, `src/ holds the product (${files.length} files)`)
  const outside: string[] = []
  const notDependencies: string[] = []
  const used = new Set<string>()
  for (const file of files) {
    for (const spec of specifiers(file)) {
      if (spec.startsWith('.')) {
        const target = resolve(dirname(file), spec)
        if (!isInside(src, target)) outside.push(`${rel(file)} imports ${spec} (${rel(target)})`)
      } else if (!isBuiltin(spec)) {
        const name = packageName(spec)
        used.add(name)
        if (!(name in pkg.dependencies)) notDependencies.push(`${rel(file)} imports ${spec}`)
      }
    }
  }
  t.same(outside, [], 'no import leaves src/ (dev/ is tooling: src/ must build and run without it)')
  t.same(notDependencies, [], 'every npm package src/ imports is a production dependency')
  t.same(
    Object.keys(pkg.dependencies).filter((d) => !used.has(d)),
    [],
    'every production dependency is used by src/ (tooling-only packages are devDependencies)',
  )
})

t.test('dev/ and test/ import the product from src/, never a build or the package by name', async (t) => {
  const builds = [join(root, 'dist'), join(root, 'dist-dev')]
  const wrong: string[] = []
  let product = 0
  for (const file of [...tsFiles(dev), ...tsFiles(test)]) {
    for (const spec of specifiers(file)) {
      if (spec.startsWith('.')) {
        const target = resolve(dirname(file), spec)
        if (builds.some((b) => isInside(b, target))) wrong.push(`${rel(file)} imports the build ${spec}`)
        else if (!existsSync(target) && !existsSync(target.replace(/\.js$/, '.ts')))
          wrong.push(`${rel(file)} imports ${spec}, which does not exist`)
        if (isInside(src, target)) product++
      } else if (packageName(spec) === pkg.name) {
        wrong.push(`${rel(file)} imports the package by name: ${spec}`)
      }
    }
  }
  t.ok(product > 50, `they do import the product (${product} imports of src/)`)
  t.same(wrong, [], 'one copy of each product module per process, from files that exist')
})
