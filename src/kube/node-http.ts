/**
 * node:http without its ES module namespace: building it reads the lazy WebSocket getters, which
 * load undici (~16 MB RSS on Node 26, never used). Types come from the erased `import type`.
 */
export const http = process.getBuiltinModule('node:http')
