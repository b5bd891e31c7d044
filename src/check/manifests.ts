/**
 * CRD manifests about to be applied (a Helm chart's crds/ folder, a release's YAML): the
 * CustomResourceDefinitions they hold and the versions each lists. Other documents are
 * left alone; a file that is not YAML, or a CRD without a name or versions, is a usage error.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { parseAllDocuments } from 'yaml'
import { ConfigError, errorMessage } from '../errors.js'

export interface ManifestCrd {
  name: string
  versions: string[]
  /** The file it came from, for messages. */
  file: string
}

const MANIFEST = /\.(ya?ml|json)$/i

/** The manifest files under `path`: the file itself, or a directory's YAML and JSON files, subdirectories included, in name order. */
export function manifestFiles(path: string): string[] {
  let stat
  try {
    stat = statSync(path)
  } catch (err) {
    throw new ConfigError(`--manifests: cannot read ${path}: ${errorMessage(err)}`, { cause: err })
  }
  if (!stat.isDirectory()) return [path]
  return readdirSync(path, { withFileTypes: true })
    .sort((a, b) => a.name.localeCompare(b.name))
    .flatMap((e) => (e.isDirectory() ? manifestFiles(join(path, e.name)) : MANIFEST.test(e.name) ? [join(path, e.name)] : []))
}

/** The CRDs of one file's text (one or more YAML documents). */
export function parseCrdManifests(text: string, file: string): ManifestCrd[] {
  const out: ManifestCrd[] = []
  for (const doc of parseAllDocuments(text)) {
    if (doc.errors.length > 0) throw new ConfigError(`--manifests: ${file} is not valid YAML: ${doc.errors[0]!.message}`)
    const value: unknown = doc.toJS()
    if (!isObject(value) || value['kind'] !== 'CustomResourceDefinition') continue
    if (value['apiVersion'] !== 'apiextensions.k8s.io/v1')
      throw new ConfigError(
        `--manifests: ${file}: a CustomResourceDefinition of ${JSON.stringify(value['apiVersion'])}, expected apiextensions.k8s.io/v1`,
      )
    const metadata = value['metadata']
    const spec = value['spec']
    const name = isObject(metadata) ? metadata['name'] : undefined
    const versions = isObject(spec) ? spec['versions'] : undefined
    if (typeof name !== 'string' || name === '')
      throw new ConfigError(`--manifests: ${file}: a CustomResourceDefinition without metadata.name`)
    if (!Array.isArray(versions) || versions.some((v) => !isObject(v) || typeof v['name'] !== 'string'))
      throw new ConfigError(`--manifests: ${file}: CustomResourceDefinition ${name} has no spec.versions with names`)
    out.push({ name, versions: versions.map((v) => (v as { name: string }).name), file })
  }
  return out
}

/** Every CRD of the files under each path; a CRD named twice is a usage error, as is finding none. */
export function readCrdManifests(paths: readonly string[]): ManifestCrd[] {
  const crds: ManifestCrd[] = []
  for (const file of paths.flatMap(manifestFiles)) {
    let text: string
    try {
      text = readFileSync(file, 'utf8')
    } catch (err) {
      throw new ConfigError(`--manifests: cannot read ${file}: ${errorMessage(err)}`, { cause: err })
    }
    for (const crd of parseCrdManifests(text, file)) {
      const twice = crds.find((c) => c.name === crd.name)
      if (twice) throw new ConfigError(`--manifests: CustomResourceDefinition ${crd.name} is in ${twice.file} and in ${crd.file}`)
      crds.push(crd)
    }
  }
  if (crds.length === 0) throw new ConfigError(`--manifests: no CustomResourceDefinition in ${paths.join(', ')}`)
  return crds
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}
