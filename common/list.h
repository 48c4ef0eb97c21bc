/* Intrusive circular doubly linked list (the Linux kernel's shape).
 *
 * A struct that lives on a list embeds a `struct list_node`; the list itself is a sentinel
 * `struct list_node` whose next is the first element and prev the last. An element that is on
 * no list points at itself (list_init() or list_del() leave it so), so list_del() of an unlinked
 * node is harmless and list_linked() tells whether it is on a list. Pure: no allocation, no I/O;
 * the list never owns its elements.
 */
#ifndef DSP_LIST_H
#define DSP_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list_node {
	struct list_node *prev, *next;
};

/* The element of type `type` whose member `member` is the node at ptr. */
#define list_entry(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* Iterates pos (a struct list_node *) over head; pos may be list_del()eted in the body (tmp
 * holds the next node). */
#define list_for_each_safe(pos, tmp, head)                                                         \
	for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);                           \
	     (pos) = (tmp), (tmp) = (pos)->next)

/* Makes n an empty list (a sentinel) or an unlinked element. */
static inline void list_init(struct list_node *n)
{
	n->prev = n->next = n;
}

/* Whether the list head has no element. */
static inline bool list_empty(const struct list_node *head)
{
	return head->next == head;
}

/* Whether the element n is on a list. */
static inline bool list_linked(const struct list_node *n)
{
	return n->next != n;
}

/* Inserts n (unlinked) at the end of head. */
static inline void list_add_tail(struct list_node *head, struct list_node *n)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}

/* Inserts n (unlinked) at the front of head. */
static inline void list_add_head(struct list_node *head, struct list_node *n)
{
	n->next = head->next;
	n->prev = head;
	head->next->prev = n;
	head->next = n;
}

/* Unlinks n from its list (if any) and leaves it unlinked. */
static inline void list_del(struct list_node *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = n;
}

/* The first element of head, or NULL when it is empty. */
static inline struct list_node *list_first(const struct list_node *head)
{
	return list_empty(head) ? NULL : head->next;
}

/* Moves every element of from to the end of to, in order; from is left empty. */
static inline void list_splice_tail(struct list_node *to, struct list_node *from)
{
	if (list_empty(from))
		return;
	from->next->prev = to->prev;
	to->prev->next = from->next;
	from->prev->next = to;
	to->prev = from->prev;
	list_init(from);
}

#endif
