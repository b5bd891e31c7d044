/** The package's version, from its package.json (shipped next to dist/ in the image and the npm package). */
import { existsSync, readFileSync } from 'node:fs'

/** The nearest package.json above this module: ../ from dist/ and src/, ../../ from the tooling's build. */
function packageJson(): { version: string } {
  for (const up of ['../package.json', '../../package.json']) {
    const url = new URL(up, import.meta.url)
    if (existsSync(url)) return JSON.parse(readFileSync(url, 'utf8')) as { version: string }
  }
  return { version: '0.0.0-unknown' }
}

/** Set by the standalone executable's bundler (scripts/build-executable.mjs): no package.json beside it. */
declare const CRD_MIGRATOR_BUNDLED_VERSION: string | undefined

export const VERSION = typeof CRD_MIGRATOR_BUNDLED_VERSION === 'string' ? CRD_MIGRATOR_BUNDLED_VERSION : packageJson().version

/** `crd-migrator/<version> (<command>)`: every request names us, for audit logs and API Priority and Fairness. */
export function userAgent(command: string): string {
  return `crd-migrator/${VERSION} (${command})`
}

/** The field manager of every write, so managedFields and audit logs name crd-migrator. */
export const FIELD_MANAGER = 'crd-migrator'
