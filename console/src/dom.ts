// DOM building without HTML parsing: every string a job controls (names, logs, results, reasons,
// output names) reaches the page through textContent or an attribute, never innerHTML.

export type Child = Node | string | number | null | undefined | false;

export interface Props {
  [name: string]: string | number | boolean | ((event: Event) => void) | undefined;
}

/** An element `tag` with `props` (on* keys are listeners; others attributes) and `children` as text or nodes. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === false) continue;
    if (typeof value === "function") {
      element.addEventListener(name.slice(2).toLowerCase(), value);
    } else if (name === "href" && typeof value === "string" && !isSafeUrl(value)) {
      throw new Error(`Refusing a link that is neither http(s) nor a console route: ${value}`);
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(element, children);
  return element;
}

/** Append each child: strings and numbers as text nodes. */
export function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }
}

/** Links the console makes: its own hash routes and the API's http(s) links (presigned downloads). */
export function isSafeUrl(url: string): boolean {
  if (url.startsWith("#/")) return true;
  try {
    const parsed = new URL(url, window.location.href);
    return parsed.protocol === "https:" || parsed.protocol === "http:";
  } catch {
    return false;
  }
}

/** Replace `parent`'s children with `children`. */
export function replace(parent: Element, ...children: Child[]): void {
  parent.replaceChildren();
  append(parent, children);
}
