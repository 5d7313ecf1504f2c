/**
 * TanStack Virtual's framework-free core bound to Preact hooks (it ships adapters for React, Vue,
 * Solid…; Preact takes the React one only through preact/compat, more bundle for one hook).
 * The instance lives as long as the component; every render hands it the current options, and
 * it asks for a render when the range to show changes.
 */
import { elementScroll, observeElementOffset, observeElementRect, Virtualizer, type VirtualizerOptions } from '@tanstack/virtual-core';
import { useLayoutEffect, useReducer, useState } from 'preact/hooks';

type Options = Omit<VirtualizerOptions<HTMLElement, HTMLElement>, 'observeElementRect' | 'observeElementOffset' | 'scrollToFn' | 'onChange'>;

export function useVirtualizer(options: Options): Virtualizer<HTMLElement, HTMLElement> {
  const [, rerender] = useReducer((n: number) => n + 1, 0);
  const full: VirtualizerOptions<HTMLElement, HTMLElement> = {
    observeElementRect,
    observeElementOffset,
    scrollToFn: elementScroll,
    ...options,
    onChange: () => rerender(0),
  };
  const [instance] = useState(() => new Virtualizer(full));
  instance.setOptions(full);
  useLayoutEffect(() => instance._didMount(), []);
  useLayoutEffect(() => instance._willUpdate());
  return instance;
}
