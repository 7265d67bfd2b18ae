// DOM helpers shared by the gallery and the mesh view. Data reaches the page through textContent and attributes,
// never as markup: `h` is the only way either page makes an element.

export const $ = (id) => document.getElementById(id);

/** An element with attributes (null and false are left out) and children (strings become text; arrays are flattened). */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value != null && value !== false) element.setAttribute(name, value === true ? '' : String(value));
  }
  element.append(...children.flat().filter((child) => child != null && child !== false));
  return element;
}
