/** Each setting's choices and default, read from the config schema: one source for validation, flag help and completion. */
import { CONFIG_DEFAULTS, ConfigSchema } from './schema.js'
import type { Setting } from './settings.js'

/** What is read of a zod schema node: its definition's wrappers, object shape, array element and enum entries. */
interface SchemaNode {
  _zod: {
    def: {
      type: string
      innerType?: SchemaNode
      shape?: Record<string, SchemaNode>
      element?: SchemaNode
      entries?: Record<string, string | number>
    }
  }
}

const WRAPPERS = new Set(['default', 'prefault', 'optional', 'nullable', 'readonly', 'nonoptional'])

function unwrap(node: SchemaNode | undefined): SchemaNode | undefined {
  let n = node
  while (n && WRAPPERS.has(n._zod.def.type) && n._zod.def.innerType) n = n._zod.def.innerType
  return n
}

function schemaAt(path: string): SchemaNode | undefined {
  let node: SchemaNode | undefined = ConfigSchema
  for (const key of path.split('.')) node = unwrap(unwrap(node)?._zod.def.shape?.[key])
  return node
}

/** The values a setting may take (for a list: each item's), when the schema fixes them. */
export function settingChoices(setting: Setting): readonly string[] | undefined {
  let node = unwrap(schemaAt(setting.path))
  if (node?._zod.def.type === 'array') node = unwrap(node._zod.def.element)
  const entries = node?._zod.def.type === 'enum' ? node._zod.def.entries : undefined
  return entries ? Object.values(entries).map(String) : undefined
}

/** The default as a user writes it (a list comma-separated); undefined when there is none, or an empty list. */
export function settingDefault(setting: Setting): string | undefined {
  let value: unknown = CONFIG_DEFAULTS
  for (const key of setting.path.split('.')) value = (value as Record<string, unknown> | undefined)?.[key]
  if (value === undefined || value === null) return undefined
  if (Array.isArray(value)) return value.length ? (value as unknown[]).map(String).join(',') : undefined
  return typeof value === 'string' ? value : JSON.stringify(value)
}
